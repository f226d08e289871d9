package observability

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Generated returns every generated file, by path relative to the
// repository's root, as the generator writes it from the sources under
// root.
func Generated(root string) (map[string][]byte, error) {
	rules, err := os.ReadFile(filepath.Join(root, RulesPath))
	if err != nil {
		return nil, err
	}
	pr, err := PrometheusRule(rules)
	if err != nil {
		return nil, err
	}
	dash, err := DashboardJSON()
	if err != nil {
		return nil, fmt.Errorf("the dashboard: %w", err)
	}
	cm, err := DashboardConfigMap(dash)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{PrometheusRulePath: pr, DashboardPath: dash, DashboardConfigMapPath: cm}, nil
}

// Write writes the generated files under root and returns their paths.
func Write(root string) ([]string, error) {
	files, err := Generated(root)
	if err != nil {
		return nil, err
	}
	var paths []string
	for p, data := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths, nil
}
