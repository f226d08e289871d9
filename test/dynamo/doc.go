// Package dynamo is the Dynamo world of kv-hint-operator's tests: a stand-in
// for Dynamo's operator, the DynamoGraphDeployment CRD it serves (written
// from Dynamo's public v1beta1 schema, in test/dynamo/crd, from the types of
// test/dynamo/v1beta1) and builders of the graphs the tests deploy.
//
// Dynamo's operator cannot be fetched as a Go module on the machines the
// tests run on, so StandIn plays the part of it that the manager meets: on
// the Deployment path (nvidia.com/enable-grove: "false", or a cluster
// without Grove) it renders each component of a DynamoGraphDeployment into
// a DynamoComponentDeployment owned by the graph and a Deployment owned by
// that, both named {graph}-{component} ({graph}-{component}-{worker hash}
// for a worker, rolled onto new objects when a worker's spec changes), with
// Dynamo's labels and defaults; it takes back a hand edit of that Deployment, as Dynamo's
// operator does, by replacing the Deployment's whole spec; and it reports
// the Deployments' rollout in the graph's status (observedGeneration, the
// Ready condition, state and per-component replica counts). It does not
// play Grove, multinode components, a DynamoComponentDeployment's own status, services,
// or the defaults Dynamo gives containers other than a frontend's command.
//
// The package is test code: the product binary never imports it. It may
// import controller-runtime and the Kubernetes API types, nothing of the
// product.
package dynamo
