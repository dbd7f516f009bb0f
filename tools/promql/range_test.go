package promqlcheck

// TestRangeQueries evaluates range queries, as a Grafana panel asks them, over series loaded
// with the promqltest `load` command, and writes the results as JSON: kraftsman's dashboard
// renderer (tests/dashboard_render.py) draws the panels from them.
//
//	PROMQL_RANGE=DIR: DIR/series.load (a `load <step>` block), DIR/queries.json
//	([{"expr", "startSeconds", "endSeconds", "stepSeconds"}]) -> DIR/results.json
//	([[{"metric": {label: value}, "values": [[seconds, value], ...]}, ...], ...], one list
//	per query; NaN values are left out).

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
)

type rangeQuery struct {
	Expr         string  `json:"expr"`
	StartSeconds float64 `json:"startSeconds"`
	EndSeconds   float64 `json:"endSeconds"`
	StepSeconds  float64 `json:"stepSeconds"`
}

type rangeSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]float64      `json:"values"`
}

func seconds(s float64) time.Time {
	return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second)))
}

func TestRangeQueries(t *testing.T) {
	dir := os.Getenv("PROMQL_RANGE")
	if dir == "" {
		t.Skip("PROMQL_RANGE: not set (the directory of series.load and queries.json)")
	}
	load, err := os.ReadFile(filepath.Join(dir, "series.load"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "queries.json"))
	if err != nil {
		t.Fatal(err)
	}
	var queries []rangeQuery
	if err := json.Unmarshal(raw, &queries); err != nil {
		t.Fatalf("queries.json: %v", err)
	}
	storage := promqltest.LoadedStorage(t, string(load))
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	results := make([][]rangeSeries, 0, len(queries))
	for _, q := range queries {
		query, err := engine.NewRangeQuery(context.Background(), storage, nil, q.Expr,
			seconds(q.StartSeconds), seconds(q.EndSeconds),
			time.Duration(q.StepSeconds*float64(time.Second)))
		if err != nil {
			t.Fatalf("%s: %v", q.Expr, err)
		}
		res := query.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s: %v", q.Expr, res.Err)
		}
		matrix, err := res.Matrix()
		if err != nil {
			t.Fatalf("%s: %v", q.Expr, err)
		}
		out := make([]rangeSeries, 0, len(matrix))
		for _, s := range matrix {
			series := rangeSeries{Metric: s.Metric.Map()}
			for _, p := range s.Floats {
				if !math.IsNaN(p.F) {
					series.Values = append(series.Values, [2]float64{float64(p.T) / 1000, p.F})
				}
			}
			out = append(out, series)
		}
		results = append(results, out)
		query.Close()
	}
	text, err := json.Marshal(results)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), text, 0o644); err != nil {
		t.Fatal(err)
	}
}
