package declared

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// AddFlags registers the flags of a declared catalog's budget, with b's
// values as defaults; the manager and every command that takes --catalog
// share them, so that a declaration the manager refuses is refused
// offline too, with the same words.
func (b *Budget) AddFlags(f *pflag.FlagSet) {
	f.Var(&bytesFlag{n: &b.DocumentBytes}, "catalog-max-bytes", "budget of a declared catalog: the most bytes of text, checked before it is parsed (a quantity: 128Ki; 0: only the 1Mi limit)")
	f.IntVar(&b.RulesPerType, "catalog-max-rules-per-type", b.RulesPerType, "budget of a declared catalog: the most CEL rules of one type (x-kubernetes-validations and commitsKVCopies); 0: no limit")
	f.IntVar(&b.Rules, "catalog-max-rules", b.Rules, "budget of a declared catalog: the most CEL rules in all; 0: no limit")
	f.Var(&bytesFlag{n: &b.RuleBytes}, "catalog-max-rule-bytes", "budget of a declared catalog: the most bytes of CEL rule text in all (a quantity); 0: no limit")
	f.IntVar(&b.SchemaNodes, "catalog-max-schema-nodes", b.SchemaNodes, "budget of a declared catalog: the most parameter-schema nodes in all; 0: no limit")
	f.Var(&quantityFlag{n: &b.RetainedBytes}, "catalog-max-memory", "budget of a declared catalog: the most memory it is estimated to keep once loaded (a quantity: 8Mi); 0: no limit")
}

// quantityFlag is a byte count written as a Kubernetes quantity.
type quantityFlag struct{ n *int64 }

func (q *quantityFlag) String() string {
	if q.n == nil {
		return "0"
	}
	return Bytes(*q.n)
}

func (q *quantityFlag) Set(s string) error {
	v, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("want a quantity of bytes such as 8Mi: %w", err)
	}
	if v.Sign() < 0 {
		return fmt.Errorf("want a quantity of bytes, not a negative one")
	}
	*q.n = v.Value()
	return nil
}

func (q *quantityFlag) Type() string { return "quantity" }

// bytesFlag is quantityFlag for an int.
type bytesFlag struct{ n *int }

func (q *bytesFlag) String() string {
	if q.n == nil {
		return "0"
	}
	return Bytes(int64(*q.n))
}

func (q *bytesFlag) Set(s string) error {
	var v int64
	if err := (&quantityFlag{n: &v}).Set(s); err != nil {
		return err
	}
	*q.n = int(v)
	return nil
}

func (q *bytesFlag) Type() string { return "quantity" }

// AddFlags registers the manager's flags of the limits: the budget of one
// declaration, and the memory the loaded declarations of a namespace, and
// of all namespaces, are estimated to keep.
func (l *Limits) AddFlags(f *pflag.FlagSet) {
	l.Budget.AddFlags(f)
	f.Var(&quantityFlag{n: &l.NamespaceBytes}, "catalog-max-memory-per-namespace", "the most memory the distinct declared catalogs of one namespace are estimated to keep together (a quantity); 0: no limit")
	f.Var(&quantityFlag{n: &l.TotalBytes}, "catalog-max-memory-total", "the most memory all declared catalogs are estimated to keep together (a quantity); 0: no limit")
	f.Var(&quantityFlag{n: &l.ReserveBytes}, "catalog-memory-reserve", "of --catalog-max-memory-total, the memory kept for the first --catalog-memory-floor-per-namespace of every namespace: what namespaces keep above that floor may take only the rest (a quantity); 0: no reserve")
	f.Var(&quantityFlag{n: &l.FloorBytes}, "catalog-memory-floor-per-namespace", "what each namespace's declared catalogs may keep out of --catalog-memory-reserve (a quantity)")
}
