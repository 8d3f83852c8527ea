package main

// Probe placement (issue #13 item 2): what an entry probe costs per call
// where the function starts with an instruction the kernel single-steps
// (endbr64 in a -fcf-protection build), placed by tttrace on the first
// emulated instruction of the prologue, against the same probe forced onto
// the entry (--probe-at-entry), and against a build whose probed
// instructions the kernel emulates anyway (the default replica: its
// probes sit on push or on the jcc after a test, no endbr64 to skip).

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// placementRun is one burst of the placement part.
type placementRun struct {
	Round     int     `json:"round"`
	Mode      string  `json:"mode"`
	BurstSecs float64 `json:"burst_secs"`
	Exit      int     `json:"exit"`
	Counted   int64   `json:"counted"` // events the ledger saw (-1: untraced)
	Err       string  `json:"err,omitempty"`
}

const (
	placeUntracedPlain = "untraced, default build"
	placeUntracedCET   = "untraced, -fcf-protection build"
	placeEmulated      = "tttrace, default build (probes on emulated instructions)"
	placePlaced        = "tttrace, -fcf-protection build, placed past endbr64 (default)"
	placeEntry         = "tttrace, -fcf-protection build, on endbr64 (--probe-at-entry)"
)

// placementEvents is the burst size of this part: the entry runs trap into
// a single-step, several times slower than the rest.
func (c *config) placementEvents() int { return max(c.events/5, 1000) }

func runPlacement(c *config) []placementRun {
	type mode struct {
		name, dir string
		traced    bool
		flags     []string
	}
	ms := []mode{
		{placeUntracedPlain, c.replica, false, nil},
		{placeUntracedCET, c.cet, false, nil},
		{placeEmulated, c.replica, true, nil},
		{placePlaced, c.cet, true, nil},
		{placeEntry, c.cet, true, []string{"--probe-at-entry"}},
	}
	burst := []string{"--scenario", "burst", "--events", strconv.Itoa(c.placementEvents())}
	var out []placementRun
	for round := 0; round < c.rounds; round++ {
		for i := range ms {
			m := ms[(i+round)%len(ms)]
			r := placementRun{Round: round, Mode: m.name, Counted: -1}
			work := filepath.Join(m.dir, "ttwork")
			var p *proc
			var err error
			sumPath := filepath.Join(c.work, "placement-summary.ndjson")
			if m.traced {
				args := append([]string{"--json", "--no-events", "-o", sumPath}, m.flags...)
				args = append(append(args, "--lib", filepath.Join(m.dir, "libtt_metal.so"), "--", work), burst...)
				p, err = startProc(nil, c.tttrace, args...)
			} else {
				p, err = startProc(nil, work, burst...)
			}
			if err != nil {
				r.Err = err.Error()
			} else {
				r.Exit, _ = p.wait()
				secs, ok := burstSecs(p.stdout.String())
				switch {
				case !ok:
					r.Err = "no burst line: " + lastLine(p.stderr.String())
				case r.Exit != 0:
					r.Err = "exit: " + lastLine(p.stderr.String())
				}
				r.BurstSecs = secs
				if m.traced && r.Err == "" {
					if s, err := readSummary(sumPath); err != nil {
						r.Err = err.Error()
					} else if r.Counted = s.seen(); r.Counted != int64(c.placementEvents()) {
						r.Err = fmt.Sprintf("the ledger saw %d of %d events", r.Counted, c.placementEvents())
					}
				}
			}
			logf("placement round %d/%d: %-62s burst %.3f s%s", round+1, c.rounds, m.name, r.BurstSecs, errSuffix(r.Err))
			out = append(out, r)
		}
	}
	return out
}

// placementRows: added cost per call of each traced mode over the untraced
// run of its own build, per round, and the ratios to the emulated probes'.
func (r *results) placementRows(c *config) []row {
	if len(r.Placement) == 0 {
		return nil
	}
	secs := map[string]map[int]float64{}
	fails := map[string]int{}
	for _, x := range r.Placement {
		if x.Err != "" {
			fails[x.Mode]++
			continue
		}
		if secs[x.Mode] == nil {
			secs[x.Mode] = map[int]float64{}
		}
		secs[x.Mode][x.Round] = x.BurstSecs
	}
	n := float64(c.placementEvents())
	// added is the added µs per event of mode over base, per round both ran.
	added := func(mode, base string) map[int]float64 {
		a := map[int]float64{}
		for round, s := range secs[mode] {
			if b, ok := secs[base][round]; ok {
				a[round] = (s - b) / n * 1e6
			}
		}
		return a
	}
	emu := added(placeEmulated, placeUntracedPlain)
	var rows []row
	for _, m := range []struct{ mode, base string }{
		{placeEmulated, placeUntracedPlain}, {placePlaced, placeUntracedCET}, {placeEntry, placeUntracedCET},
	} {
		a := added(m.mode, m.base)
		var v, ratios []float64
		for round, x := range a {
			v = append(v, x)
			if e, ok := emu[round]; ok && e > 0 {
				ratios = append(ratios, x/e)
			}
		}
		meas := fmt.Sprintf("added **%.2f µs/event** median (%d rounds)%s", median(v), len(v), spreadFlag(v))
		goal, met := "(reference)", ""
		if m.mode != placeEmulated {
			lo, hi := minMax(ratios)
			meas += fmt.Sprintf(" = **%.2fx** the emulated probes (rounds %.2f-%.2f)", median(ratios), lo, hi)
			if m.mode == placePlaced {
				goal, met = "≤ 1.2x the emulated probes", yesNo(len(ratios) > 0 && median(ratios) <= 1.2)
			} else {
				goal = "(what placement avoids)"
			}
		}
		if f := fails[m.mode]; f > 0 {
			meas += fmt.Sprintf("; %d runs failed", f)
		}
		rows = append(rows, row{"2p", fmt.Sprintf("probe placement, burst of %d events: %s", c.placementEvents(), m.mode), meas, goal, met})
	}
	return rows
}
