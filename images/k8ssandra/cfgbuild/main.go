// The `config build` command of k8ssandra-client: the server-config-init init container that cass-operator runs
// for Cassandra >= 4.1. Built from the vendored snapshot's pkg/config only, so the binary carries no helm, kubectl
// or kind (the full CLI does).
//
// usage: kubectl-k8ssandra config build [--input DIR] [--output DIR] [--sidecar]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/k8ssandra/k8ssandra-client/pkg/config"
)

func main() {
	if len(os.Args) < 3 || os.Args[1] != "config" || os.Args[2] != "build" {
		fmt.Fprintln(os.Stderr, "usage: kubectl-k8ssandra config build [--input DIR] [--output DIR] [--sidecar]")
		os.Exit(2)
	}
	flags := flag.NewFlagSet("build", flag.ExitOnError)
	input := flags.String("input", "", "read the config files from this folder instead of /cassandra-base-config")
	output := flags.String("output", "", "write the config files to this folder instead of /config")
	sidecar := flags.Bool("sidecar", false, "process sidecar.yaml")
	_ = flags.Parse(os.Args[3:])
	var options []config.BuilderOption
	if *sidecar {
		options = append(options, config.WithSidecar())
	}
	if err := config.NewBuilder(*input, *output, options...).Build(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "config build:", err)
		os.Exit(1)
	}
}
