package rolegraph

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dynamograph"
)

// ReadManifests decodes a multi-document YAML stream of Kubernetes objects
// (the items of a List included) and adds to in the RouterRoles and
// HintPolicies, and the ConfigMaps, Pods, Deployments and DynamoGraphDeployments,
// it holds. Documents of other
// kinds are skipped, so the output of a kustomize build can be checked as
// it is. Decoding is strict: an unknown or mistyped field is an error. A
// bad document does not stop the others; the errors, each a
// *DocumentError, are joined.
func ReadManifests(data []byte, in *Input) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var errs []error
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, &DocumentError{Document: n, Err: err})
			break
		}
		if err := readDocument(doc, in); err != nil {
			errs = append(errs, &DocumentError{Document: n, Err: err})
		}
	}
	return errors.Join(errs...)
}

// DocumentError is a document of a manifest stream that could not be read.
type DocumentError struct {
	// Document is the 1-based number of the document in the stream.
	Document int
	Err      error
}

func (e *DocumentError) Error() string { return fmt.Sprintf("document %d: %v", e.Document, e.Err) }

func (e *DocumentError) Unwrap() error { return e.Err }

// IsManifest reports whether data is a Kubernetes manifest rather than a
// hints YAML file: its first document that is not empty has a kind or an
// apiVersion.
func IsManifest(data []byte) bool {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err != nil {
			return false
		}
		var tm map[string]any
		if yaml.Unmarshal(doc, &tm) != nil {
			return false
		}
		if tm == nil {
			continue
		}
		_, kind := tm["kind"]
		_, apiVersion := tm["apiVersion"]
		return kind || apiVersion
	}
}

func readDocument(doc []byte, in *Input) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return fmt.Errorf("not a Kubernetes object: %w", err)
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return err
	}
	switch {
	case strings.HasSuffix(tm.Kind, "List"):
		// kubectl get -o yaml writes a List; typed lists hold the same.
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(js, &list); err != nil {
			return fmt.Errorf("%s: %w", tm.Kind, err)
		}
		var errs []error
		for i, item := range list.Items {
			if err := readDocument(item, in); err != nil {
				errs = append(errs, fmt.Errorf("item %d: %w", i, err))
			}
		}
		return errors.Join(errs...)
	case gv.Group == v1alpha1.GroupVersion.Group:
		if gv != v1alpha1.GroupVersion {
			return fmt.Errorf("apiVersion %s is not served by this build; use %s", tm.APIVersion, v1alpha1.GroupVersion)
		}
		switch tm.Kind {
		case "RouterRole":
			var rr v1alpha1.RouterRole
			if err := strict(js, &rr); err != nil {
				return fmt.Errorf("RouterRole: %w", err)
			}
			in.RouterRoles = append(in.RouterRoles, rr)
		case "HintPolicy":
			var hp v1alpha1.HintPolicy
			if err := strict(js, &hp); err != nil {
				return fmt.Errorf("HintPolicy: %w", err)
			}
			in.HintPolicies = append(in.HintPolicies, hp)
		default:
			return fmt.Errorf("kind %s is not part of %s; known: RouterRole, HintPolicy", tm.Kind, tm.APIVersion)
		}
	case tm.APIVersion == "v1" && tm.Kind == "ConfigMap":
		var cm corev1.ConfigMap
		if err := strict(js, &cm); err != nil {
			return fmt.Errorf("ConfigMap: %w", err)
		}
		in.ConfigMaps = append(in.ConfigMaps, cm)
	case tm.APIVersion == "apps/v1" && tm.Kind == "Deployment":
		// A router Deployment's pod template says how Dynamo's router
		// starts (its mode, its policy file); the rest is read leniently.
		var d appsv1.Deployment
		if err := json.Unmarshal(js, &d); err != nil {
			//lint:ignore ST1005 the message starts with the Kind, as the others here do
			return fmt.Errorf("Deployment: %w", err)
		}
		in.Deployments = append(in.Deployments, d)
	case tm.APIVersion == dynamograph.GroupVersion.String() && tm.Kind == dynamograph.Kind:
		// A router DynamoGraphDeployment: its router component's
		// template, as for a Deployment; the rest is read leniently.
		var g dynamograph.Graph
		if err := json.Unmarshal(js, &g); err != nil {
			return fmt.Errorf("DynamoGraphDeployment: %w", err)
		}
		in.Graphs = append(in.Graphs, g)
	case tm.APIVersion == "v1" && tm.Kind == "Pod":
		// Only the metadata and phase of router pods matter; the rest is
		// read leniently.
		var pod corev1.Pod
		if err := json.Unmarshal(js, &pod); err != nil {
			//lint:ignore ST1005 the message starts with the Kind, as the others here do
			return fmt.Errorf("Pod: %w", err)
		}
		in.Pods = append(in.Pods, pod)
	}
	return nil
}

func strict(js []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}
