// Command txbox runs txbox's migrations, its relay daemon and its demo.
// Every command lives in internal/cli (the demo in internal/demo, which
// cmd/txbox/demo also runs alone); see docs/reference/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
