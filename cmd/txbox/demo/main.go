// Command demo runs txbox's demo alone: the same program as "txbox demo"
// (flags included, see docs/reference/cli.md), built from only what the demo
// runs (SQLite and an embedded NATS server), so that a first
// "go run ./cmd/txbox/demo" downloads and compiles none of the other
// databases and brokers the txbox program supports.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/txbox/txbox/cmd/txbox/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := demo.Command()
	cmd.Use = "demo"
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(os.Args[1:])
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "txbox: error: %s\n", strings.TrimPrefix(err.Error(), "txbox: "))
		os.Exit(1)
	}
}
