package sim

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"
)

func TestProfScale(t *testing.T) {
	sc, err := Load("scale")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create("/tmp/scale.prof")
	pprof.StartCPUProfile(f)
	defer pprof.StopCPUProfile()
	res, err := Run(context.Background(), sc, Options{Policies: []string{"crosstalk"}})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Results[0].Agent
	t.Logf("max %.1f mean %.1f p95 %.1f first %v", a.IntervalCPUMaxMs, a.IntervalCPUMeanMs, a.IntervalCPUP95Ms, a.IntervalCPUMs[:12])
}
