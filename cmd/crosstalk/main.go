// Command crosstalk finds the tenant polluting shared hardware on a
// multi-tenant Linux host and throttles only it. See `crosstalk --help`.
package main

import (
	"os"

	"github.com/crosstalk-project/crosstalk/internal/cli"
)

// Set with -ldflags "-X main.version=… -X main.commit=…" by the release build.
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	os.Exit(cli.Execute(cli.Build{Version: version, Commit: commit}, os.Args[1:]))
}
