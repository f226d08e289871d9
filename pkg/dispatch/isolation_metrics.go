package dispatch

// isolationSeries are one policy's isolation series, resolved when the
// policy first loads and kept while it stays in the config.
type isolationSeries struct {
	abandonedReturn             Observer
	ejections                   [numEjectReasons]Counter
	ejected, probation, stuck   Gauge
	skippedEjected, skippedBusy Counter
}

// isolationOf resolves the isolation series of a policy that may block.
func isolationOf(m Metrics, role, policy, typ string) *isolationSeries {
	im := m.Isolation(role, policy, typ)
	if im == nil {
		im = nop{}
	}
	s := &isolationSeries{
		abandonedReturn: observer(im.AbandonedRunSeconds()),
		ejected:         gauge(im.Ejected()),
		probation:       gauge(im.Probation()),
		stuck:           gauge(im.AbandonedRuns()),
		skippedEjected:  counter(im.SkippedEjected()),
		skippedBusy:     counter(im.SkippedBusy()),
	}
	for r := EjectOverrun; r < numEjectReasons; r++ {
		s.ejections[r] = counter(im.Ejections(r))
	}
	return s
}
