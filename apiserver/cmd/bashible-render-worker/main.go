// Command bashible-render-worker renders NodeGroupConfiguration templates
// for bashible-apiserver, which starts it (templates/sandbox) and talks to
// it over its standard input and output. It is a binary of its own, beside
// bashible-apiserver in its image, so that a worker links only the template
// engine: a fifth of the server's binary, whose pages it neither maps nor
// shares with the server.
package main

import (
	"fmt"
	"os"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/templates/sandbox"
)

func main() {
	sandbox.RunWorkerIfRequested()
	fmt.Fprintf(os.Stderr, "%s renders templates for %s, which starts it; it is not run by hand\n",
		deckhousev1.BashibleRenderWorkerName, deckhousev1.BashibleAPIServerName)
	os.Exit(2)
}
