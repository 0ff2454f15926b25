package main

import "context"

func runScale(ctx context.Context, b *bench) error  { return nil }
func runMemory(ctx context.Context, b *bench) error { return nil }
