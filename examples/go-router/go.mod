module example.com/go-router

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/kvrouter/kv-hint-operator v0.0.0
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

// Development against this repository's tree; a router's module requires a
// released version instead and drops the replace.
replace github.com/kvrouter/kv-hint-operator => ../..
