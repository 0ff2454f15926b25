package main

import (
	"context"
	"fmt"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runLease(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "lease", "acquire|renew|release|status SESSION",
		"Manages who may write SESSION. acquire prints the new epoch: pass it to 'put --epoch' (the lease is\n"+
			"not renewed after this command exits; it lapses after --ttl). renew and release need --epoch.\n"+
			"Agents use the SDK instead (Acquire, Resume, Pause), which renews while the process lives.")
	var k keyFlags
	var out outputFlag
	k.register(fs)
	out.register(fs)
	ttl := fs.Duration("ttl", checkpoint.DefaultLeaseTTL, "acquire, renew: how long the lease holds")
	owner := fs.String("owner", "", "acquire: the owner's name (default: host/pid of this command)")
	force := fs.Bool("force", false, "acquire: take the lease even from a live owner, whose later writes are then refused")
	epoch := fs.Uint64("epoch", 0, "renew, release: the epoch acquire printed")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("lease", pos, 2, "an operation (acquire, renew, release, status) and SESSION"); err != nil {
		return err
	}
	op, key := pos[0], k.key(pos[1])
	if (op == "renew" || op == "release") && *epoch == 0 {
		return usageErr(fmt.Errorf("lease %s needs --epoch", op))
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	var info checkpoint.LeaseInfo
	switch op {
	case "acquire":
		opts := []checkpoint.LeaseOption{checkpoint.WithTTL(*ttl), checkpoint.WithoutRenewal()}
		if *owner != "" {
			opts = append(opts, checkpoint.WithOwner(*owner))
		}
		if *force {
			opts = append(opts, checkpoint.WithForce())
		}
		l, err := c.Acquire(ctx, key, opts...)
		if err != nil {
			return err
		}
		info = l.Info()
	case "renew", "release":
		l := c.Held(key, *epoch, *ttl)
		if op == "renew" {
			err = l.Renew(ctx)
		} else {
			err = l.Release(ctx)
		}
		if err != nil {
			return err
		}
		info = l.Info()
	case "status":
		if info, err = c.LeaseStatus(ctx, key); err != nil {
			return err
		}
	default:
		return usageErr(fmt.Errorf("lease: unknown operation %q (want acquire, renew, release or status)", op))
	}
	if out == "json" {
		return writeJSON(a.Stdout, info)
	}
	switch {
	case info.Epoch == 0:
		_, err = fmt.Fprintf(a.Stdout, "%s: never leased\n", printable(key.WithDefaults().String()))
	case info.Owner == "":
		_, err = fmt.Fprintf(a.Stdout, "%s: free (released at epoch %d)\n", printable(key.WithDefaults().String()), info.Epoch)
	default:
		state := "held"
		if !info.Held(time.Now()) {
			state = "expired"
		}
		_, err = fmt.Fprintf(a.Stdout, "%s: epoch %d, %s by %s until %s\n", printable(key.WithDefaults().String()), info.Epoch,
			state, printable(info.Owner), info.Expires.Local().Format(time.DateTime))
	}
	return err
}
