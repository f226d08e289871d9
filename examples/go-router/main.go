// Command go-router is a minimal Go router that links kv-hint-operator's
// dispatch core in-process instead of running the kvhint sidecar: for every
// request it books a worker, runs the role's hint policies from the same
// hints config the operator compiles, and carries the hint in-band, on the
// request it forwards: at kv_transfer_params.kv_hint, where Dynamo's vLLM
// handler reads it, or, with --hint-path, at a top-level kv_hints (the
// vLLM and SGLang proposals) or the legacy kv_transfer_params.router_hint.
//
//	go-router --hints hints.yaml --role decode --router-mode kv \
//	    --worker decode-0=http://10.0.0.5:8000,router_hint --worker decode-1=http://10.0.0.6:8000
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kvrouter/kv-hint-operator/pkg/dispatch"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
	"github.com/kvrouter/kv-hint-operator/pkg/hintsconfig"
)

type workerFlags []Worker

func (w *workerFlags) String() string { return fmt.Sprint(*w) }

// Set parses ID=URL[,router_hint].
func (w *workerFlags) Set(s string) error {
	id, rest, ok := strings.Cut(s, "=")
	if !ok || id == "" {
		return errors.New("want ID=URL[,router_hint]")
	}
	url, caps, _ := strings.Cut(rest, ",")
	*w = append(*w, Worker{ID: id, URL: url, RouterHint: caps == "router_hint"})
	return nil
}

func main() {
	var workers workerFlags
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve requests on")
	hintsFile := flag.String("hints", "hints.yaml", "hints config (the ConfigMap's hints.yaml)")
	role := flag.String("role", "decode", "the role this router books workers for")
	mode := flag.String("router-mode", "kv", "the router's mode, which every role of the hints config runs under, as Dynamo's --router-mode; hints run only under kv")
	flag.Var(&workers, "worker", "a worker, ID=URL[,router_hint]; repeat for each")
	hintPath := dispatch.InBandKVHint
	flag.Var(&hintPath, "hint-path", "where the forwarded request carries the hint: kv_transfer_params.kv_hint, kv_hints or kv_transfer_params.router_hint")
	flag.Parse()
	if len(workers) == 0 {
		log.Fatal("no --worker given")
	}
	doc, err := os.ReadFile(*hintsFile)
	if err != nil {
		log.Fatal(err)
	}
	d := dispatch.NewDispatcher(dispatch.Options{Catalog: builtin.NewCatalog(), Workers: Capabilities(workers), RouterMode: hintsconfig.RouterMode(*mode)})
	if err := d.Load(doc, *hintsFile); err != nil {
		log.Fatal(err)
	}
	rt := NewRouter(*role, workers, d)
	rt.HintPath = hintPath
	srv := &http.Server{Addr: *listen, Handler: rt,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Printf("go-router: %s, role %s, %d workers, hints at %s, hints config %s", *listen, *role, len(workers), hintPath, d.ConfigHash())
	log.Fatal(srv.ListenAndServe())
}
