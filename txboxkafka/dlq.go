package txboxkafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/internal/wire"
)

// HeaderRedriveFor names, on a dead letter DeadLetters.Redrive produced
// back to its topic, the one binding that is to handle it: the
// Subscriber's subscriptions of the topic's other groups settle it
// without handing it out.
const HeaderRedriveFor = "Txbox-Redrive-For"

// HeaderDeadSettled marks a record of a dead-letter topic that settles the
// dead letter at the ref it holds (PARTITION:OFFSET, in the same
// partition): DeadLetters.Redrive and Discard produce it, as Kafka cannot
// delete one record. HeaderDeadAction says which of the two it was.
const (
	HeaderDeadSettled = "Txbox-Dead-Settled"
	HeaderDeadAction  = "Txbox-Dead-Action"
)

// DeadLetters implements dlq.Store on Kafka: a binding's dead letters are
// the records of its topic's dead-letter topic (TOPIC+DeadLetterSuffix)
// whose Txbox-Binding names the binding, less those settled; a Ref is
// "PARTITION:OFFSET" in the dead-letter topic; DeadAt is the record's
// timestamp.
//
// Kafka cannot delete one record, so Redrive and Discard settle a dead
// letter by producing a marker record (HeaderDeadSettled, no key, no
// value) to its partition, after it. Each call reads the dead-letter topic
// from its start (Get: the letter's partition from the letter) to the end
// offsets it had when the call began, with a group-less reader made from
// the client's options; retention removes a letter before its marker. The
// dead-letter topic must use delete retention, not compaction.
type DeadLetters struct {
	cl     *kgo.Client
	suffix string
	owned  bool // made by DeadLettersFromURL: Close closes cl
}

var _ dlq.Store = (*DeadLetters)(nil)

// NewDeadLetters returns the dead letters of the bindings of a Subscriber
// configured with suffix as its DeadLetterSuffix ("": the default). cl
// answers metadata and offset requests and produces redriven letters
// (with its partitioner: the default one puts a letter back in its key's
// partition); whoever created it closes it.
func NewDeadLetters(cl *kgo.Client, suffix string) (*DeadLetters, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: kafka: nil client", txbox.ErrInvalidConfig)
	}
	if suffix == "" {
		suffix = DefaultDeadLetterSuffix
	}
	return &DeadLetters{cl: cl, suffix: suffix}, nil
}

// ref is a dead letter's place in its dead-letter topic.
type ref struct {
	part   int32
	offset int64
}

func (r ref) String() string {
	return strconv.Itoa(int(r.part)) + ":" + strconv.FormatInt(r.offset, 10)
}

func parseRef(s string) (ref, error) {
	p, o, ok := strings.Cut(s, ":")
	part, perr := strconv.ParseInt(p, 10, 32)
	off, oerr := strconv.ParseInt(o, 10, 64)
	if !ok || perr != nil || oerr != nil || part < 0 || off < 0 {
		return ref{}, fmt.Errorf("%w: kafka: dead letter %q: a ref is PARTITION:OFFSET (see txbox dlq list)", dlq.ErrNotFound, s)
	}
	return ref{int32(part), off}, nil
}

// letter is a dead letter read from the dead-letter topic.
type letter struct {
	ref ref
	dlq.Letter
	rec *kgo.Record
}

// scan is what one read of a binding's dead-letter topic found.
type scan struct {
	letters []*letter       // the binding's dead letters, settled or not, in read order
	settled map[ref]bool    // refs a marker settles
	ends    map[int32]int64 // the end offsets the read stopped at
	byRef   map[ref]*letter // letters by ref
	topic   string          // the binding's topic
	dead    string          // its dead-letter topic
}

// offsets returns the start (earliest) or end (latest) offset of each
// partition of topic.
func (d *DeadLetters) offsets(ctx context.Context, topic string, ts int64) (map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, d.cl)
	if err != nil {
		return nil, fmt.Errorf("txboxkafka: metadata of %s: %w", topic, err)
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("txboxkafka: metadata of %s: %d topics in the answer", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("txboxkafka: dead-letter topic %s: %w", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p.Partition, ts
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, d.cl)
	if err != nil {
		return nil, fmt.Errorf("txboxkafka: list offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("txboxkafka: list offsets of %s[%d]: %w", topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out, nil
}

// read reads the binding's dead-letter topic: every partition from its
// start, or only partition from offset when from is set, up to the end
// offsets of the moment.
func (d *DeadLetters) read(ctx context.Context, binding string, from *ref) (*scan, error) {
	topic, _, err := ParseBinding(binding)
	if err != nil {
		return nil, err
	}
	s := &scan{settled: map[ref]bool{}, byRef: map[ref]*letter{}, topic: topic, dead: topic + d.suffix}
	if s.ends, err = d.offsets(ctx, s.dead, -1); err != nil {
		return nil, err
	}
	starts, err := d.offsets(ctx, s.dead, -2)
	if err != nil {
		return nil, err
	}
	want := map[int32]kgo.Offset{}
	for p, end := range s.ends {
		start := starts[p]
		if from != nil {
			if p != from.part {
				continue
			}
			start = max(start, from.offset)
		}
		if start < end {
			want[p] = kgo.NewOffset().At(start)
		}
	}
	if len(want) == 0 {
		return s, nil
	}
	rd, err := kgo.NewClient(append(d.cl.Opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.dead: want}))...)
	if err != nil {
		return nil, fmt.Errorf("txboxkafka: reader of %s: %w", s.dead, err)
	}
	defer rd.Close()
	for len(want) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) {
			errs = append(errs, fmt.Errorf("txboxkafka: fetch %s[%d]: %w", t, p, err))
		})
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := want[r.Partition]; !ok || r.Offset >= s.ends[r.Partition] {
				return
			}
			if r.Offset+1 >= s.ends[r.Partition] {
				delete(want, r.Partition)
			}
			s.add(binding, r)
		})
	}
	return s, nil
}

// add takes in one record of the dead-letter topic.
func (s *scan) add(binding string, r *kgo.Record) {
	if b, _ := header(r, txbox.HeaderBinding); b != binding {
		return
	}
	if v, ok := header(r, HeaderDeadSettled); ok {
		if at, err := parseRef(v); err == nil {
			s.settled[at] = true
		}
		return
	}
	at := ref{r.Partition, r.Offset}
	l := dlq.Letter{Ref: at.String(), Binding: binding, DeadAt: r.Timestamp.UTC()}
	l.Topic, l.Key, l.Payload = s.topic, string(r.Key), r.Value
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case txbox.HeaderMessageID:
			if l.ID == "" {
				l.ID = v
			}
		case txbox.HeaderCreatedAt:
			if l.CreatedAt.IsZero() {
				l.CreatedAt = wire.ParseTime(v)
			}
		case txbox.HeaderError:
			l.Error = v
		case txbox.HeaderDeliveries:
			l.Deliveries, _ = strconv.Atoi(v)
		case txbox.HeaderBinding, HeaderRedriveFor:
		default:
			if l.Headers == nil {
				l.Headers = map[string]string{}
			}
			if _, dup := l.Headers[h.Key]; !dup {
				l.Headers[h.Key] = v
			}
		}
	}
	s.letters = append(s.letters, &letter{ref: at, Letter: l, rec: r})
	s.byRef[at] = s.letters[len(s.letters)-1]
}

// ordered returns the letters oldest first (by DeadAt, then partition and
// offset), settled ones included.
func (s *scan) ordered() []*letter {
	out := slices.Clone(s.letters)
	slices.SortFunc(out, func(a, b *letter) int {
		return cmp.Or(a.DeadAt.Compare(b.DeadAt), cmp.Compare(a.ref.part, b.ref.part), cmp.Compare(a.ref.offset, b.ref.offset))
	})
	return out
}

// List returns the binding's dead letters matching q, oldest first (by the
// time they went dead, then partition and offset). After is a ref.
func (d *DeadLetters) List(ctx context.Context, binding string, q dlq.Query) (dlq.Page, error) {
	var after *ref
	if q.After != "" {
		a, err := parseRef(q.After)
		if err != nil {
			return dlq.Page{}, err
		}
		after = &a
	}
	s, err := d.read(ctx, binding, nil)
	if err != nil {
		return dlq.Page{}, err
	}
	all := s.ordered()
	i := 0
	if after != nil {
		i = slices.IndexFunc(all, func(l *letter) bool { return l.ref == *after })
		if i < 0 {
			return dlq.Page{}, fmt.Errorf("%w: kafka: --after %s: no dead letter of %s there (removed by retention?)", dlq.ErrNotFound, q.After, binding)
		}
		i++
	}
	var p dlq.Page
	for _, l := range all[i:] {
		if s.settled[l.ref] || !q.Match(l.Letter) {
			continue
		}
		if len(p.Letters) == max(q.Limit, 1) {
			p.More = true
			break
		}
		p.Letters = append(p.Letters, l.Letter)
	}
	return p, nil
}

// Get returns the dead letter at ref.
func (d *DeadLetters) Get(ctx context.Context, binding, r string) (dlq.Letter, error) {
	l, err := d.get(ctx, binding, r)
	if err != nil {
		return dlq.Letter{}, err
	}
	return l.Letter, nil
}

func (d *DeadLetters) get(ctx context.Context, binding, r string) (*letter, error) {
	at, err := parseRef(r)
	if err != nil {
		return nil, err
	}
	s, err := d.read(ctx, binding, &at)
	if err != nil {
		return nil, err
	}
	l := s.byRef[at]
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: kafka: no dead letter of %s at %s in %s", dlq.ErrNotFound, binding, r, s.dead)
	case s.settled[at]:
		return nil, fmt.Errorf("%w: kafka: the dead letter at %s in %s is redriven or discarded", dlq.ErrNotFound, r, s.dead)
	}
	return l, nil
}

// Redrive produces each dead letter to the binding's topic as the
// Publisher wrote it (same key, id, payload, headers, created-at) plus
// HeaderRedriveFor naming the binding (the topic's other groups skip it),
// with a fresh delivery count; then it settles the dead letter.
func (d *DeadLetters) Redrive(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, "redrive", func(s *scan, l *letter) error {
		c := &kgo.Record{Topic: s.topic, Key: l.rec.Key, Value: l.rec.Value}
		for _, h := range l.rec.Headers {
			switch h.Key {
			case txbox.HeaderDeliveries, txbox.HeaderError, txbox.HeaderBinding, HeaderRedriveFor:
			default:
				c.Headers = append(c.Headers, h)
			}
		}
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: HeaderRedriveFor, Value: []byte(binding)})
		if err := d.cl.ProduceSync(ctx, c).FirstErr(); err != nil {
			return fmt.Errorf("txboxkafka: redrive %s to %s: %w", l.Ref, s.topic, err)
		}
		return nil
	})
}

// Discard settles the dead letters.
func (d *DeadLetters) Discard(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, "discard", func(*scan, *letter) error { return nil })
}

func (d *DeadLetters) each(ctx context.Context, binding string, refs []string, action string, do func(*scan, *letter) error) (dlq.Result, error) {
	var r dlq.Result
	if _, _, err := ParseBinding(binding); err != nil {
		return r, err
	}
	if len(refs) == 0 {
		return r, nil
	}
	s, err := d.read(ctx, binding, nil)
	if err != nil {
		return r, err
	}
	// Markers go to the letter's own partition: a manual partitioner.
	w, err := kgo.NewClient(append(d.cl.Opts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return r, fmt.Errorf("txboxkafka: writer of %s: %w", s.dead, err)
	}
	defer w.Close()
	for _, ref := range refs {
		at, err := parseRef(ref)
		l := s.byRef[at]
		if err != nil || l == nil || s.settled[at] {
			r.Missed = append(r.Missed, ref)
			continue
		}
		if err := do(s, l); err != nil {
			return r, err
		}
		m := &kgo.Record{Topic: s.dead, Partition: at.part, Headers: []kgo.RecordHeader{
			{Key: txbox.HeaderBinding, Value: []byte(binding)},
			{Key: HeaderDeadSettled, Value: []byte(at.String())},
			{Key: HeaderDeadAction, Value: []byte(action)},
		}}
		if err := w.ProduceSync(ctx, m).FirstErr(); err != nil {
			return r, fmt.Errorf("txboxkafka: settle %s in %s: %w", ref, s.dead, err)
		}
		s.settled[at] = true
		r.Done = append(r.Done, ref)
	}
	return r, nil
}
