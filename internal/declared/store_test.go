package declared

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kvrouter/kv-hint-operator/api/v1alpha1"
	"github.com/kvrouter/kv-hint-operator/pkg/hints/builtin"
)

// catalogCM is a declared-catalog ConfigMap of router holding text.
func catalogCM(ns, name, router, text string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name),
			Labels: map[string]string{v1alpha1.CatalogForLabel: router}},
		Data: map[string]string{v1alpha1.CatalogKey: text},
	}
}

func readDecl(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/custom-router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStoreShareByContent: ConfigMaps holding the same text, in one
// namespace or two, cost one load; it is released when the last of them
// is gone.
func TestStoreShareByContent(t *testing.T) {
	text := readDecl(t)
	objs := []client.Object{catalogCM("a", "c1", "r1", text), catalogCM("a", "c2", "r2", text), catalogCM("b", "c1", "r1", text)}
	c := NewStore(fake.NewClientBuilder().WithObjects(objs...).Build(), builtin.NewCatalog(), DefaultLimits())
	ctx := context.Background()
	var first *RouterCatalog
	for _, k := range []types.NamespacedName{{Namespace: "a", Name: "r1"}, {Namespace: "a", Name: "r2"}, {Namespace: "b", Name: "r1"}} {
		rc, err := c.ForRouter(ctx, k.Namespace, k.Name)
		if err != nil || rc.Problem != nil {
			t.Fatalf("%s: %v %v", k, err, rc.Problem)
		}
		if first == nil {
			first = &rc
		} else if rc.Catalog != first.Catalog {
			t.Errorf("%s: a catalog of its own; want the one loaded for the same text", k)
		}
	}
	if n, bytes := c.Loaded(); n != 1 || bytes <= 0 {
		t.Errorf("loaded %d declarations (%d bytes), want 1", n, bytes)
	}
	// Deleted: each delete event forgets its ConfigMap and its router is
	// reconciled, which lets go of its last good declaration.
	for _, o := range objs {
		if err := c.reader.(client.Client).Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
		c.Forget(o.GetUID())
		if _, err := c.ForRouter(ctx, o.GetNamespace(), o.GetLabels()[v1alpha1.CatalogForLabel]); err != nil {
			t.Fatal(err)
		}
	}
	if n, bytes := c.Loaded(); n != 0 || bytes != 0 {
		t.Errorf("after every ConfigMap is gone: %d declarations (%d bytes) kept, want 0", n, bytes)
	}
}

// TestStoreNamespaceBudget: distinct declarations of one namespace
// past its budget are refused, naming the budget, while another
// namespace still loads; an update releases what the old text cost.
func TestStoreNamespaceBudget(t *testing.T) {
	text := readDecl(t)
	other := text + "\n# another text\n"
	objs := []client.Object{catalogCM("a", "c1", "r1", text), catalogCM("a", "c2", "r2", other), catalogCM("b", "c1", "r1", other)}
	limits := DefaultLimits()
	c := NewStore(fake.NewClientBuilder().WithObjects(objs...).Build(), builtin.NewCatalog(), limits)
	ctx := context.Background()
	if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || rc.Problem != nil {
		t.Fatalf("a/r1: %v %v", err, rc.Problem)
	}
	_, one := c.Loaded()
	c.limits.NamespaceBytes = one + one/2
	rc, err := c.ForRouter(ctx, "a", "r2")
	if err != nil || rc.Problem == nil || !strings.Contains(rc.Problem.Message, "over the budget of") ||
		!strings.Contains(rc.Problem.Message, "per namespace (manager flag --catalog-max-memory-per-namespace)") {
		t.Fatalf("a/r2 over the namespace budget: %v %+v", err, rc.Problem)
	}
	if rc, err := c.ForRouter(ctx, "b", "r1"); err != nil || rc.Problem != nil {
		t.Fatalf("b/r1, another namespace: %v %v", err, rc.Problem)
	}
	c.limits.TotalBytes = one
	if err := c.reader.(client.Client).Delete(ctx, objs[2]); err != nil {
		t.Fatal(err)
	}
	c.Forget("b/c1")
	if _, err := c.ForRouter(ctx, "b", "r1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Loaded(); n != 1 {
		t.Fatalf("after b/c1 is gone: %d declarations, want 1", n)
	}
	// Once a/c1 is gone, a/r2's text fits again: a refusal for what
	// others keep is not remembered.
	if err := c.reader.(client.Client).Delete(ctx, objs[0]); err != nil {
		t.Fatal(err)
	}
	c.Forget("a/c1")
	if _, err := c.ForRouter(ctx, "a", "r1"); err != nil {
		t.Fatal(err)
	}
	if rc, err := c.ForRouter(ctx, "a", "r2"); err != nil || rc.Problem != nil {
		t.Fatalf("a/r2 after a/c1 is gone: %v %v", err, rc.Problem)
	}
}

// TestStoreLoadOutsideLock: while a load holds the one load slot, a
// router with no declaration and a router whose declaration is loaded
// are resolved at once, and one that needs a load waits (here: until its
// context ends) without holding the others up.
func TestStoreLoadOutsideLock(t *testing.T) {
	text := readDecl(t)
	objs := []client.Object{catalogCM("a", "c1", "r1", text), catalogCM("a", "c2", "r2", text+"\n# other\n")}
	c := NewStore(fake.NewClientBuilder().WithObjects(objs...).Build(), builtin.NewCatalog(), DefaultLimits())
	ctx := context.Background()
	if _, err := c.ForRouter(ctx, "a", "r1"); err != nil {
		t.Fatal(err)
	}
	c.sem <- struct{}{} // a load under way
	defer func() { <-c.sem }()
	done := make(chan error, 3)
	go func() { _, err := c.ForRouter(ctx, "b", "plain"); done <- err }()
	go func() { _, err := c.ForRouter(ctx, "a", "r1"); done <- err }()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.ForRouter(short, "a", "r2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a router that needs a load while another runs: %v, want it to wait for the slot", err)
	}
}

// TestStoreLoadInBackground: in the manager's mode a router whose
// declaration is not loaded yet gets pending at once, even while another
// load holds the slot, instead of holding its reconcile; the ConfigMap is
// sent on the loaded channel when the load ends, and the next read finds
// it. A load refused for what the others keep is told to the next read
// once, and loaded again after that.
func TestStoreLoadInBackground(t *testing.T) {
	text := readDecl(t)
	objs := []client.Object{catalogCM("a", "c1", "r1", text), catalogCM("a", "c2", "r2", text+"\n# other\n")}
	c := NewStore(fake.NewClientBuilder().WithObjects(objs...).Build(), builtin.NewCatalog(), DefaultLimits())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded := c.LoadInBackground(ctx)
	next := func(want string) {
		t.Helper()
		select {
		case ev := <-loaded:
			if ev.Object.Name != want {
				t.Fatalf("loaded %s, want %s", ev.Object.Name, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no word of %s's load", want)
		}
	}

	c.sem <- struct{}{} // another load under way
	start := time.Now()
	rc, err := c.ForRouter(ctx, "a", "r1")
	if err != nil || !rc.Pending {
		t.Fatalf("a/r1 while the slot is taken: %+v %v, want pending", rc, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a/r1 took %v to say pending", took)
	}
	if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || !rc.Pending {
		t.Fatalf("a/r1 asked again: %+v %v, want pending", rc, err)
	}
	<-c.sem
	next("c1")
	if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || rc.Pending || rc.Problem != nil || rc.Catalog == nil {
		t.Fatalf("a/r1 once loaded: %+v %v", rc, err)
	}

	// r2's text does not fit beside r1's.
	_, one := c.Loaded()
	c.limits.NamespaceBytes = one + one/2
	if rc, err := c.ForRouter(ctx, "a", "r2"); err != nil || !rc.Pending {
		t.Fatalf("a/r2: %+v %v, want pending", rc, err)
	}
	next("c2")
	rc, err = c.ForRouter(ctx, "a", "r2")
	if err != nil || rc.Pending || rc.Problem == nil || !strings.Contains(rc.Problem.Message, "--catalog-max-memory-per-namespace") {
		t.Fatalf("a/r2 after its load was refused: %+v %v, want the namespace budget's refusal", rc, err)
	}
	if rc, err := c.ForRouter(ctx, "a", "r2"); err != nil || !rc.Pending {
		t.Fatalf("a/r2 read again: %+v %v, want a new load", rc, err)
	}
	next("c2")
}

// TestStoreEditedDuringLoad: a ConfigMap edited twelve times while
// its loads wait for the load slot, and twelve times more while they
// wait or run, leaves one load, the last text's;
// the loads of the texts it no longer holds are cancelled and their
// estimates returned, and once it is deleted nothing is kept. Before,
// each edit left the old load held by nothing, kept and counted for
// good: near the budget, every new declaration was refused until a
// restart.
func TestStoreEditedDuringLoad(t *testing.T) {
	text := readDecl(t)
	cm := catalogCM("a", "c1", "r1", text)
	cl := fake.NewClientBuilder().WithObjects(cm).Build()
	c := NewStore(cl, builtin.NewCatalog(), DefaultLimits())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded := c.LoadInBackground(ctx)

	edit := func(v int) {
		t.Helper()
		var cur corev1.ConfigMap
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Data[v1alpha1.CatalogKey] = fmt.Sprintf("%s\n# version %d\n", text, v)
		if err := cl.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
		if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || !rc.Pending {
			t.Fatalf("version %d: %+v %v, want pending", v, rc, err)
		}
	}
	c.sem <- struct{}{} // another load under way: each version waits
	for v := range 12 {
		edit(v)
	}
	if n, bytes := c.Loaded(); n != 1 || bytes != 0 {
		t.Errorf("while the last version waits: %d declarations (%d bytes) kept or reserved, want 1 waiting (0 bytes)", n, bytes)
	}
	<-c.sem
	// Twelve more with the slot free: each version's load starts, and
	// the next edit finds it waiting or running.
	for v := range 12 {
		edit(100 + v)
	}
	err := within(30*time.Second, func() error {
		select {
		case <-loaded:
		default:
		}
		if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || rc.Pending {
			return fmt.Errorf("not loaded: %+v %v", rc, err)
		}
		if n, _ := c.Loaded(); n != 1 || len(c.sem) != 0 {
			return fmt.Errorf("%d declarations kept, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after the loads ended: %v", err)
	}
	// Deleted: the delete event forgets it and its router is reconciled.
	if err := cl.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	c.Forget(cm.UID)
	if _, err := c.ForRouter(ctx, "a", "r1"); err != nil {
		t.Fatal(err)
	}
	if n, bytes := c.Loaded(); n != 0 || bytes != 0 {
		t.Errorf("after the ConfigMap is gone: %d declarations (%d bytes) kept, want 0", n, bytes)
	}
}

// within polls f every 10 ms until it returns nil, and returns its last
// error after d.
func within(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStoreReserve: namespaces that fill their own budget cannot take
// the manager's whole budget: what they keep above each namespace's
// floor stops at the total less the reserve, and a small declaration
// (config/catalogs/dynamo.yaml) in a namespace of its own still loads.
// Before, four namespaces each within their budget took the total and a
// fifth's dynamo.yaml was refused. Limits are set in units of what the
// Dynamo declaration is estimated to keep: the floor one, the reserve
// six (six namespaces' floors), four per namespace, twelve in all.
func TestStoreReserve(t *testing.T) {
	b, err := os.ReadFile("../../config/catalogs/dynamo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dynamo := string(b)
	var objs []client.Object
	for ns := range 4 {
		for r := range 4 {
			objs = append(objs, catalogCM(fmt.Sprint("tenant", ns), fmt.Sprint("c", r), fmt.Sprint("r", r), fmt.Sprintf("%s\n# tenant %d, router %d\n", dynamo, ns, r)))
		}
	}
	for ns := range 2 {
		objs = append(objs, catalogCM(fmt.Sprint("small", ns), "c0", "r0", dynamo))
	}
	c := NewStore(fake.NewClientBuilder().WithObjects(objs...).Build(), builtin.NewCatalog(), DefaultLimits())
	ctx := context.Background()
	if rc, err := c.ForRouter(ctx, "small0", "r0"); err != nil || rc.Problem != nil {
		t.Fatalf("small0/r0: %v %v", err, rc.Problem)
	}
	_, one := c.Loaded()
	c.Forget("small0/c0")
	c.limits = Limits{Budget: c.limits.Budget, NamespaceBytes: 4 * one, TotalBytes: 12 * one, FloorBytes: one, ReserveBytes: 6 * one}

	got := map[string]string{}
	for ns := range 4 {
		for r := range 4 {
			rc, err := c.ForRouter(ctx, fmt.Sprint("tenant", ns), fmt.Sprint("r", r))
			if err != nil {
				t.Fatal(err)
			}
			if rc.Problem != nil {
				got[fmt.Sprintf("tenant%d/r%d", ns, r)] = rc.Problem.Message
			}
		}
	}
	// The first two take their namespace's budget (three above the
	// floor each: the six shared); the other two their floor only.
	for _, k := range []string{"tenant2/r1", "tenant2/r2", "tenant2/r3", "tenant3/r1", "tenant3/r2", "tenant3/r3"} {
		if !strings.Contains(got[k], "--catalog-memory-reserve") {
			t.Errorf("%s: %q, want the reserve's refusal", k, got[k])
		}
		delete(got, k)
	}
	if len(got) > 0 {
		t.Errorf("refused beyond the reserve: %v", got)
	}
	for ns := range 2 {
		if rc, err := c.ForRouter(ctx, fmt.Sprint("small", ns), "r0"); err != nil || rc.Problem != nil {
			t.Errorf("small%d/r0, the Dynamo declaration after four namespaces filled theirs: %v %v", ns, err, rc.Problem)
		}
	}
	if _, total := c.Loaded(); total > c.limits.TotalBytes {
		t.Errorf("%d kept, over the total of %d", total, c.limits.TotalBytes)
	}
	t.Logf("config/catalogs/dynamo.yaml is estimated to keep %s; the default floor of a namespace is %s", Bytes(one), Bytes(DefaultLimits().FloorBytes))
}

// TestStoreLastGoodCounted: a router's last good declaration, kept
// while its ConfigMap holds one that cannot be used, counts against the
// namespace until it is replaced or the ConfigMap is gone, and does not
// count against the declaration that replaces it. Before, it was kept
// and counted as nothing: a tenant that broke each router's declaration
// after it loaded kept any number of them past the budget.
func TestStoreLastGoodCounted(t *testing.T) {
	text := readDecl(t)
	cm := catalogCM("a", "c1", "r1", text)
	cl := fake.NewClientBuilder().WithObjects(cm, catalogCM("a", "c2", "r2", text+"\n# r2\n")).Build()
	c := NewStore(cl, builtin.NewCatalog(), DefaultLimits())
	ctx := context.Background()
	set := func(data string) {
		t.Helper()
		var cur corev1.ConfigMap
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Data[v1alpha1.CatalogKey] = data
		if err := cl.Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
	}
	if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || rc.Problem != nil {
		t.Fatalf("a/r1: %v %v", err, rc.Problem)
	}
	_, one := c.Loaded()
	c.limits.NamespaceBytes = one + one/2

	set("apiVersion: hints.kvrouter.io/v1alpha1\nkind: PolicyCatalog\n")
	if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || rc.Problem == nil || rc.Catalog == c.linked {
		t.Fatalf("a/r1 broken: %+v %v, want its problem and its last good catalog", rc, err)
	}
	if _, kept := c.Loaded(); kept != one {
		t.Errorf("while a/r1's last good declaration is kept: %d bytes counted, want %d", kept, one)
	}
	if rc, err := c.ForRouter(ctx, "a", "r2"); err != nil || rc.Problem == nil || !strings.Contains(rc.Problem.Message, "--catalog-max-memory-per-namespace") {
		t.Errorf("a/r2 beside a/r1's last good declaration: %+v %v, want the namespace budget's refusal", rc, err)
	}

	set(text + "\n# fixed\n")
	if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || rc.Problem != nil {
		t.Fatalf("a/r1 fixed: %v %v; the declaration it replaces must not count against it", err, rc.Problem)
	}
	if _, kept := c.Loaded(); kept != one {
		t.Errorf("once a/r1's declaration is replaced: %d bytes counted, want %d", kept, one)
	}
	if err := cl.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	c.Forget(cm.UID)
	if rc, err := c.ForRouter(ctx, "a", "r1"); err != nil || rc.Problem != nil || rc.Catalog != c.linked {
		t.Fatalf("a/r1 with no declaration: %+v %v", rc, err)
	}
	if n, kept := c.Loaded(); n != 0 || kept != 0 {
		t.Errorf("after a/r1's ConfigMap is gone: %d declarations (%d bytes) counted, want 0", n, kept)
	}
}
