// Package promqlcheck runs PromQL test scripts (Prometheus' own promqltest language: load
// series, eval an expression, the expected result) against Prometheus' own query engine.
// kraftsman's tests write the scripts (the dashboard's and the alerts' queries, with the
// series the operator serves) into a directory and run this test binary on it.
package promqlcheck

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/prometheus/prometheus/promql/promqltest"
)

func TestScripts(t *testing.T) {
	dir := os.Getenv("PROMQL_SCRIPTS")
	if dir == "" {
		t.Fatal("PROMQL_SCRIPTS: set it to the directory of the *.test scripts")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.test"))
	if err != nil || len(files) == 0 {
		t.Fatalf("PROMQL_SCRIPTS=%s: no *.test script (%v)", dir, err)
	}
	sort.Strings(files)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for _, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			promqltest.RunTest(t, string(content), engine)
		})
	}
}
