package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// `checkpointd healthcheck` asks the running daemon's /healthz and exits 0 when it answers 200, 1
// otherwise. It exists for the container's HEALTHCHECK: the image has no shell and no curl. It reads
// the address from CHECKPOINTD_HTTP_LISTEN (as the daemon does), or from its one optional argument.

// healthcheckCommand is the word that selects it, as the first argument.
const healthcheckCommand = "healthcheck"

// healthcheck runs the check and returns the exit code.
func healthcheck(args []string, stdout, stderr io.Writer) int {
	addr := "127.0.0.1:9333"
	if v, ok := os.LookupEnv(envPrefix + "HTTP_LISTEN"); ok {
		addr = v
	}
	switch len(args) {
	case 0:
	case 1:
		addr = args[0]
	default:
		fmt.Fprintln(stderr, "usage: checkpointd healthcheck [HOST:PORT | http://HOST:PORT] (default: $CHECKPOINTD_HTTP_LISTEN or 127.0.0.1:9333)")
		return 2
	}
	url, err := healthzURL(addr)
	if err != nil {
		fmt.Fprintln(stderr, "checkpointd healthcheck:", err)
		return 2
	}
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintf(stderr, "checkpointd healthcheck: %v (is checkpointd running with --http-listen %s?)\n", err, addr)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "checkpointd healthcheck: %s: %s", resp.Status, body)
		return 1
	}
	fmt.Fprintf(stdout, "%s", body)
	return 0
}

// healthzURL turns a listen address into the URL to ask: a wildcard host (0.0.0.0, ::, empty) means
// "every interface", so the check asks loopback.
func healthzURL(addr string) (string, error) {
	if u, err := url.Parse(addr); err == nil && u.Scheme == "http" && u.Host != "" && (u.Path == "" || u.Path == "/" || u.Path == "/healthz") {
		addr = u.Host // the address as a URL, as curl would take it: http://HOST:PORT[/healthz]
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("HTTP address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
