package devenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/internal/dev/simworker"
)

// Status is what a person running the environment wants to see.
type Status struct {
	Roles   []RoleStatus
	Routers []RouterStatus
	Workers []WorkerStatus
}

// RoleStatus is one RouterRole's conditions.
type RoleStatus struct {
	Name, Router, Role, Mode string
	// Conditions maps a condition type to "True", or "False (Reason)".
	Conditions map[string]string
	Pods       string
	// Message is the first message of a condition that is not True.
	Message string
}

// RouterStatus is a router's compiled config and what its pods run.
type RouterStatus struct {
	Router string
	// Hash is the compiled ConfigMap's content hash; empty before one is written.
	Hash string
	// Applied maps each router pod to the hash its sidecar reports.
	Applied map[string]string
}

// WorkerStatus is what one simulated worker received.
type WorkerStatus struct {
	ID, Router string
	RouterHint bool
	// HintEndpoint is whether its pod advertises a hint endpoint, so that
	// its sidecar pushes hints to it too.
	HintEndpoint bool
	// InBand counts the hints it took on its requests, Pushed those posted
	// to its hint endpoint; Requests the completion requests it served.
	InBand, Pushed, Requests int
	// Actions counts the actions of its recorded in-band hints, by type.
	Actions map[string]int
	// Rejected counts the malformed hints it refused, in-band or pushed;
	// -1 when the worker could not be read.
	Rejected int
	// Results counts the actions of the hints it took, in-band and pushed,
	// by the result it answered, in vLLM's vocabulary (applied, deferred,
	// duplicate, rejected, unsupported).
	Results map[string]int
}

// Status reads the API server and the workers.
func (e *Env) Status(ctx context.Context) (*Status, error) {
	st := &Status{}
	var rrs v1alpha1.RouterRoleList
	if err := e.Client.List(ctx, &rrs, client.InNamespace(e.Opts.Namespace)); err != nil {
		return nil, err
	}
	for _, rr := range rrs.Items {
		rs := RoleStatus{Name: rr.Name, Router: rr.Spec.Router, Role: rr.Spec.Role, Mode: string(rr.Spec.RouterMode), Conditions: map[string]string{}}
		for _, t := range []v1alpha1.ConditionType{v1alpha1.ConditionAccepted, v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionProgrammed, v1alpha1.ConditionReady} {
			c := meta.FindStatusCondition(rr.Status.Conditions, string(t))
			switch {
			case c == nil:
				rs.Conditions[string(t)] = "-"
			case c.Status == "True":
				rs.Conditions[string(t)] = "True"
			default:
				rs.Conditions[string(t)] = fmt.Sprintf("%s (%s)", c.Status, c.Reason)
				if rs.Message == "" {
					rs.Message = c.Message
				}
			}
		}
		if rr.Status.RouterPods != nil {
			rs.Pods = rr.Status.RouterPods.Summary
		}
		st.Roles = append(st.Roles, rs)
	}
	sort.Slice(st.Roles, func(i, j int) bool { return st.Roles[i].Name < st.Roles[j].Name })

	for _, s := range e.Sidecars {
		rs := RouterStatus{Router: s.Router, Applied: map[string]string{}}
		var cm corev1.ConfigMap
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Opts.Namespace, Name: v1alpha1.HintsConfigMapName(s.Router)}, &cm); err == nil {
			rs.Hash = cm.Annotations[v1alpha1.HashAnnotation]
		}
		var pod corev1.Pod
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Opts.Namespace, Name: s.PodName}, &pod); err == nil {
			rs.Applied[pod.Name] = pod.Annotations[v1alpha1.AppliedHashAnnotation]
		}
		st.Routers = append(st.Routers, rs)
	}

	httpc := &http.Client{Timeout: 2 * time.Second}
	for _, w := range e.Workers {
		ws := WorkerStatus{ID: w.ID, Router: w.Router, RouterHint: w.RouterHint, HintEndpoint: w.HintEndpoint, Actions: map[string]int{}, Results: map[string]int{}}
		if err := readWorker(ctx, httpc, w.URL, &ws); err != nil {
			ws.Rejected = -1
		}
		st.Workers = append(st.Workers, ws)
	}
	return st, nil
}

func readWorker(ctx context.Context, c *http.Client, url string, ws *WorkerStatus) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/hints", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var got simworker.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 128<<20)).Decode(&got); err != nil {
		return err
	}
	ws.InBand, ws.Pushed, ws.Requests = int(got.InBand.Accepted), int(got.Accepted), int(got.Requests)
	ws.Rejected = got.Rejected + got.InBand.Rejected
	for _, counts := range []map[string]int64{got.Results, got.InBand.Results} {
		for r, n := range counts {
			ws.Results[r] += int(n)
		}
	}
	for _, h := range got.InBand.Hints {
		var m simworker.Message
		if json.Unmarshal(h.Body, &m) == nil {
			for _, a := range m.Actions {
				ws.Actions[a.ActionType]++
			}
		}
	}
	return nil
}

// Print renders the status as three tables.
func (st *Status) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTERROLE\tROUTER\tROLE\tMODE\tACCEPTED\tRESOLVEDREFS\tPROGRAMMED\tPODS\tREADY")
	for _, r := range st.Roles {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Router, r.Role, r.Mode,
			r.Conditions[string(v1alpha1.ConditionAccepted)], r.Conditions[string(v1alpha1.ConditionResolvedRefs)],
			r.Conditions[string(v1alpha1.ConditionProgrammed)], orDash(r.Pods), r.Conditions[string(v1alpha1.ConditionReady)])
	}
	tw.Flush()
	for _, r := range st.Roles {
		if r.Message != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, r.Message)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "ROUTER\tCOMPILED HASH\tROUTER PODS (APPLIED HASH)")
	for _, r := range st.Routers {
		var pods []string
		for p, h := range r.Applied {
			pods = append(pods, p+"="+orDash(h))
		}
		sort.Strings(pods)
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Router, orDash(r.Hash), strings.Join(pods, " "))
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "WORKER\tROUTER\tROUTER_HINT\tIN-BAND\tPUSHED\tREQUESTS\tREJECTED\tRESULTS\tIN-BAND ACTIONS")
	for _, wk := range st.Workers {
		var acts []string
		for t, n := range wk.Actions {
			acts = append(acts, fmt.Sprintf("%s=%d", t, n))
		}
		sort.Strings(acts)
		var results []string
		for r, n := range wk.Results {
			results = append(results, fmt.Sprintf("%s=%d", r, n))
		}
		sort.Strings(results)
		hint := "no"
		if wk.RouterHint {
			hint = "yes"
		}
		pushed := "-" // no hint endpoint advertised: nothing is pushed
		if wk.HintEndpoint || wk.Pushed > 0 {
			pushed = strconv.Itoa(wk.Pushed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", wk.ID, wk.Router, hint, wk.InBand, pushed, wk.Requests, wk.Rejected,
			orDash(strings.Join(results, " ")), orDash(strings.Join(acts, " ")))
	}
	tw.Flush()
}

// AllReady reports whether every role is Ready.
func (st *Status) AllReady() bool {
	if len(st.Roles) == 0 {
		return false
	}
	for _, r := range st.Roles {
		if r.Conditions[string(v1alpha1.ConditionReady)] != "True" {
			return false
		}
	}
	return true
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
