package outboxsql

// lazyMarker is a dialect whose mark of the published rows can carry
// lazy_commit itself, saving Finish a statement (a round trip) on every
// batch without ordering keys: PostgreSQL.
type lazyMarker interface {
	// markPublishedLazy returns the mark (a delete when del) that also
	// makes the commit lazy.
	markPublishedLazy(seqs []int64, del bool) (string, []any)
}

var _ lazyMarker = (*postgres)(nil)

func (p *postgres) markPublishedLazy(seqs []int64, del bool) (string, []any) {
	if del {
		return p.withIDs(p.deleteLazy, seqs)
	}
	return p.withIDs(p.markLazy, seqs)
}
