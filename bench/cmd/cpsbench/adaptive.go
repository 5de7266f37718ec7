package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// adaptiveCmd plots the curve TestE2EAdaptiveCarrierSettlesUnderItsLimit
// (sip/e2e_test.go) records with CPSGUARD_ADAPTIVE_CSV: an adaptive carrier
// that polices limit CPS itself, configured and offered at twice that. The
// run is the test's own (bench/adaptive.sh runs it); this draws it.
func adaptiveCmd(fs *flag.FlagSet) func(*env) error {
	in := fs.String("csv", "bench/out/adaptive.csv", "the curve the e2e test wrote")
	limit := fs.Float64("limit", 20, "the CPS the carrier polices itself")
	return func(e *env) error {
		f, err := os.Open(*in)
		if err != nil {
			return err
		}
		defer f.Close()
		rows, err := csv.NewReader(f).ReadAll()
		if err != nil {
			return fmt.Errorf("%s: %w", *in, err)
		}
		if len(rows) < 2 {
			return fmt.Errorf("%s: no samples", *in)
		}
		var at, eff, acc, ref []float64
		for i, r := range rows[1:] {
			if len(r) != 4 {
				return fmt.Errorf("%s: row %d has %d fields, want 4", *in, i+2, len(r))
			}
			var v [4]float64
			for j := range r {
				if v[j], err = strconv.ParseFloat(r[j], 64); err != nil {
					return fmt.Errorf("%s: row %d: %w", *in, i+2, err)
				}
			}
			at, eff, acc, ref = append(at, v[0]), append(eff, v[1]), append(acc, v[2]), append(ref, v[3])
		}
		png := filepath.Join(e.results, "adaptive-carrier.png")
		if err := plotSeries(png, fmt.Sprintf("Adaptive carrier policing %g CPS, configured and offered at %g CPS", *limit, 2**limit),
			"seconds", "calls per second", []plotLine{
				{name: "effective cps (pool, AIMD)", x: at, y: eff},
				{name: "accepted by the carrier in the last second", x: at, y: acc},
				{name: "refused (503) in the last second", x: at, y: ref},
			}, *limit); err != nil {
			return err
		}
		fmt.Println("wrote", png)
		return nil
	}
}
