package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kv-hint-operator/internal/testing/dynamopolicy"
)

// dynamoSample is the shipped Dynamo router sample: a declared catalog, a
// role running the router build's harness_prefetch, an opted-in
// Deployment whose template starts the router with --router-mode kv.
const dynamoSample = "../../config/samples/dynamo-router/router.yaml"

// writeVariant writes the sample with each old string replaced by its new
// one (every replacement must apply) and returns the file.
func writeVariant(t *testing.T, extra string, oldNew ...string) string {
	t.Helper()
	data, err := os.ReadFile(dynamoSample)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			t.Fatalf("the sample has no %q any more", oldNew[i])
		}
		s = strings.ReplaceAll(s, oldNew[i], oldNew[i+1])
	}
	path := filepath.Join(t.TempDir(), "router.yaml")
	if err := os.WriteFile(path, []byte(s+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestValidateManifestsDeclaredCatalog: `kvhint validate -f` on a Dynamo
// router's manifests checks its roles against the catalog its ConfigMap
// declares and the router mode its Deployment's template runs, as the
// manager does, with the manager's reasons.
func TestValidateManifestsDeclaredCatalog(t *testing.T) {
	code, out, errOut := runCLI("validate", "-f", dynamoSample)
	if code != ExitOK || out != "1 file(s) valid\n" || errOut != "" {
		t.Fatalf("the shipped sample: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	conflict := `---
apiVersion: v1
kind: ConfigMap
metadata:
  name: llama-catalog-2
  labels:
    hints.kvrouter.io/catalog-for: llama
data:
  catalog.yaml: "{}"
`
	unusedPolicy := `---
apiVersion: hints.kvrouter.io/v1alpha1
kind: HintPolicy
metadata:
  name: prefetch-wide
spec:
  type: harness_prefetch
  parameters:
    max_blocks: %s
`
	for _, tc := range []struct {
		name  string
		file  string
		want  []string // each a line of the report, from the reason on
		valid bool
	}{
		{name: "round-robin template", file: writeVariant(t, "", "- kv\n", "- round-robin\n"),
			want: []string{`RouterRole llama-decode spec.hints: HintsRequireKVMode: hints run only on the KV path, but --router-mode of container "frontend" of Deployment llama-frontend is "round-robin"`}},
		// As the manager's Programmed=False PolicyFileNotRead (issue 29):
		// a router that would start without the compiled file fails CI.
		{name: "a user-set --router-policy-config", file: writeVariant(t, "", "- kv\n", "- kv\n        - --router-policy-config\n        - /etc/router/hints.yaml\n"),
			want: []string{`RouterRole llama-decode spec.router (Deployment llama-frontend): PolicyFileNotRead: container "frontend" of Deployment llama-frontend sets --router-policy-config to /etc/router/hints.yaml: the router would read that file, not the compiled config the manager mounts at /etc/kvhint/policy/hints.yaml`}},
		{name: "a user-set DYN_ROUTER_POLICY_CONFIG", file: writeVariant(t, "", "        args:\n", "        env:\n        - {name: DYN_ROUTER_POLICY_CONFIG, value: /etc/dynamo/policy.yaml}\n        args:\n"),
			want: []string{`RouterRole llama-decode spec.router (Deployment llama-frontend): PolicyFileNotRead: container "frontend" of Deployment llama-frontend sets DYN_ROUTER_POLICY_CONFIG to /etc/dynamo/policy.yaml`}},
		{name: "out of range", file: writeVariant(t, "", "max_blocks: 64", "max_blocks: 0"),
			want: []string{`RouterRole llama-decode spec.hints[0] (harness_prefetch): InvalidParameters: parameter "max_blocks": 0 is below the minimum 1`}},
		{name: "unknown parameter", file: writeVariant(t, "", "max_blocks: 64", "max_blocks: 64\n      depth: 2"),
			want: []string{`RouterRole llama-decode spec.hints[0] (harness_prefetch): InvalidParameters: `, `"depth"`}},
		{name: "a type the build does not declare", file: writeVariant(t, "", "- type: harness_prefetch\n    parameters", "- type: kv-retain\n    parameters"),
			want: []string{`RouterRole llama-decode spec.hints[0] (kv-retain): UnknownHintType: `}},
		{name: "two declarations", file: writeVariant(t, conflict),
			want: []string{`RouterRole llama-decode spec.router (ConfigMap llama-catalog, llama-catalog-2): CatalogConflict: 2 ConfigMaps declare the catalog of router llama`}},
		{name: "broken declaration", file: writeVariant(t, "", "kind: PolicyCatalog", "kind: PolicyCatalogue"),
			want: []string{`RouterRole llama-decode spec.router (ConfigMap llama-catalog): InvalidCatalog: ConfigMap llama-catalog declares the catalog of router llama, but it cannot be used`}},
		{name: "unused HintPolicy of a declared type", file: writeVariant(t, strings.Replace(unusedPolicy, "%s", "8", 1)), valid: true},
		{name: "unused HintPolicy of a declared type, out of range", file: writeVariant(t, strings.Replace(unusedPolicy, "%s", "0", 1)),
			want: []string{`HintPolicy prefetch-wide spec.parameters (harness_prefetch): InvalidParameters: parameter "max_blocks": 0 is below the minimum 1`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI("validate", "-f", tc.file)
			if tc.valid {
				if code != ExitOK || errOut != "" {
					t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
				}
				return
			}
			if code != ExitInvalid {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, ExitInvalid, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out+errOut, w) {
					t.Errorf("the report lacks %q:\n%s%s", w, out, errOut)
				}
			}
		})
	}
}

// TestManifestsReleasedForm: a router whose declared catalog says its
// build reads the released form (policyFileForm: RouterWideHint) gets its
// file written in that form, and roles that do not all run one and the
// same hint policy are refused with PolicyFormCannotCarry, as the manager
// refuses them.
func TestManifestsReleasedForm(t *testing.T) {
	role := func(maxBlocks string) string {
		return `---
apiVersion: hints.kvrouter.io/v1alpha1
kind: RouterRole
metadata:
  name: llama-prefill
spec:
  router: llama
  role: prefill
  workerSelection:
    type: dynamo-default-cost-fn
    parameters: {router_temperature: 0.5}
  hints:
  - type: harness_prefetch
    parameters:
      max_blocks: ` + maxBlocks + "\n"
	}
	released := []string{"    kind: PolicyCatalog\n", "    kind: PolicyCatalog\n    policyFileForm: RouterWideHint\n"}

	same := writeVariant(t, role("64"), released...)
	code, out, errOut := runCLI("compile", "-f", same)
	if code != ExitOK {
		t.Fatalf("compile: exit %d\n%s%s", code, out, errOut)
	}
	const want = `kv_hint_policy:
  parameters:
    max_blocks: 64
  type: harness_prefetch
worker_selection:
  decode: default
  instances:
  - name: prefill
    parameters:
      router_temperature: 0.5
    type: dynamo-default-cost-fn
  prefill: prefill
`
	if out != want {
		t.Errorf("compiled file:\n%s\nwant:\n%s", out, want)
	}
	if err := dynamopolicy.CheckReleased([]byte(out)); err != nil {
		t.Errorf("a released Frontend would refuse it: %v", err)
	}

	differ := writeVariant(t, role("32"), released...)
	code, out, errOut = runCLI("validate", "-f", differ)
	if code != ExitInvalid {
		t.Fatalf("validate: exit %d, want %d\n%s%s", code, ExitInvalid, out, errOut)
	}
	for _, w := range []string{
		"RouterRole llama-decode spec.hints: PolicyFormCannotCarry: the router's build reads the RouterWideHint policy-file form",
		"RouterRole llama-prefill spec.hints: PolicyFormCannotCarry: ",
		`role prefill runs [harness_prefetch {"max_blocks":32}], role decode runs [harness_prefetch {"max_blocks":64}]`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}

	// A restart-mode router whose declaration states no form runs a
	// released Frontend: the released form, and the same refusal.
	code, out, errOut = runCLI("validate", "-f", writeVariant(t, role("32")))
	if code != ExitInvalid || !strings.Contains(out, "PolicyFormCannotCarry") {
		t.Errorf("no declared form: exit %d, want %d with PolicyFormCannotCarry\n%s%s", code, ExitInvalid, out, errOut)
	}

	// The same roles under a build declared to read per-role hints are two
	// per-role lists.
	perRole := writeVariant(t, role("32"), "    kind: PolicyCatalog\n", "    kind: PolicyCatalog\n    policyFileForm: PerRoleHints\n")
	code, out, errOut = runCLI("validate", "-f", perRole)
	if code != ExitOK {
		t.Errorf("per-role form: exit %d\n%s%s", code, out, errOut)
	}
}

// TestValidateManifestsGraph: `kvhint validate -f` on the shipped
// DynamoGraphDeployment sample reads the router component's template as
// the manager does (spec.env first), and reports the manager's pre-flight
// refusals, each under its own reason.
func TestValidateManifestsGraph(t *testing.T) {
	const sample = "../../config/samples/dynamo-graph/graph.yaml"
	code, out, errOut := runCLI("validate", "-f", sample)
	if code != ExitOK || out != "1 file(s) valid\n" || errOut != "" {
		t.Fatalf("the shipped sample: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(old, new string) string {
		t.Helper()
		if !strings.Contains(string(data), old) {
			t.Fatalf("the sample has no %q any more", old)
		}
		path := filepath.Join(t.TempDir(), "graph.yaml")
		if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct{ name, file, want string }{
		{"an EPP without its token limit", variant("    type: frontend\n", "    type: epp\n"),
			`RouterRole llama-decode spec.router (DynamoGraphDeployment llama): RouterWouldNotStart: component "frontend" of DynamoGraphDeployment llama: an EPP given a policy config needs DYN_EPP_MAX_NUM_BATCHED_TOKENS`},
		{"Grove OnDelete", variant(`router-component: ""`, "router-component: \"\"\n    nvidia.com/grove-update-strategy: OnDelete"),
			`RouterRole llama-decode spec.router (DynamoGraphDeployment llama): UpdateStrategyOnDelete: DynamoGraphDeployment llama: annotation nvidia.com/grove-update-strategy is OnDelete`},
		{"a user-set path in spec.env", variant("{name: DYN_ROUTER_MODE, value: kv}", "{name: DYN_ROUTER_MODE, value: kv}\n  - {name: DYN_ROUTER_POLICY_CONFIG, value: /etc/mine.yaml}"),
			`PolicyFileNotRead: container "main" of component "frontend" of DynamoGraphDeployment llama sets DYN_ROUTER_POLICY_CONFIG to /etc/mine.yaml`},
		{"an instance the file does not have", variant("{name: DYN_ROUTER_MODE, value: kv}", "{name: DYN_ROUTER_MODE, value: kv}\n  - {name: DYN_ROUTER_WORKER_SELECTION_POLICY, value: sticky}"),
			`RouterWouldNotStart: DYN_ROUTER_WORKER_SELECTION_POLICY of container "main" of component "frontend" of DynamoGraphDeployment llama is "sticky", which names no instance`},
		{"pods without the router label", variant("          hints.kvrouter.io/router: llama   # the manager counts the router's pods by it\n", "          app: frontend\n"),
			`InvalidRouterWorkload: component "frontend" of DynamoGraphDeployment llama: podTemplate.metadata.labels has hints.kvrouter.io/router=""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI("validate", "-f", tc.file)
			if code != ExitInvalid || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("exit %d (want %d); the report lacks %q:\n%s%s", code, ExitInvalid, tc.want, out, errOut)
			}
		})
	}
}

// TestManifestsDeclaredDynamoVersion: the declared catalog's dynamoVersion
// picks the router's dialect as the manager picks it: the sample's
// Frontend image (tag latest) says no version, so its --agentic is a
// Dynamo 1.7 preset only when the catalog says 1.7; a dynamoVersion that
// is no version makes the declaration unusable, naming the key.
func TestManifestsDeclaredDynamoVersion(t *testing.T) {
	agentic := []string{"        - kv\n", "        - kv\n        - --agentic\n"}
	for _, tc := range []struct {
		name    string
		file    string
		code    int
		want    string
		notWant string
	}{
		{name: "1.7 declared", file: writeVariant(t, "", append(agentic, "    kind: PolicyCatalog\n", "    kind: PolicyCatalog\n    dynamoVersion: \"1.7\"\n")...), code: ExitOK,
			want: `PresetOverridesParameters (warning): --agentic of container "frontend" of Deployment llama-frontend: a Dynamo 1.7 router preset (Dynamo 1.7 from the declared catalog's dynamoVersion 1.7)`},
		{name: "nothing declared: 1.6, no presets", file: writeVariant(t, "", agentic...), code: ExitOK, notWant: "PresetOverridesParameters"},
		{name: "not a version", file: writeVariant(t, "", "    kind: PolicyCatalog\n", "    kind: PolicyCatalog\n    dynamoVersion: seven\n"), code: ExitInvalid,
			want: `InvalidCatalog: ConfigMap llama-catalog declares the catalog of router llama, but it cannot be used: invalid policy catalog: line 3: dynamoVersion: "seven" is not a Dynamo version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI("validate", "-f", tc.file)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			if tc.want != "" && !strings.Contains(out+errOut, tc.want) {
				t.Errorf("the report lacks %q:\n%s%s", tc.want, out, errOut)
			}
			if tc.notWant != "" && strings.Contains(out+errOut, tc.notWant) {
				t.Errorf("the report has %q:\n%s%s", tc.notWant, out, errOut)
			}
		})
	}
}
