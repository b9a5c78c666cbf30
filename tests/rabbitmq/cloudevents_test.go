package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// amqpMessage is a delivery as the CloudEvents AMQP binding reads an AMQP
// message in binary mode (content-type = datacontenttype, each
// application property named prefix+NAME an attribute, other prefixed
// ones extensions), over the CloudEvents Go SDK's binding and spec
// packages: AMQP 0-9-1 headers are what RabbitMQ hands an AMQP 1.0 client
// as application-properties. (The SDK's own AMQP binding module, which
// reads the prefix "cloudEvents:" from an AMQP 1.0 link, is not served
// by the module proxy this project uses, and this RabbitMQ speaks only
// AMQP 0-9-1.)
type amqpMessage struct {
	d       amqp.Delivery
	prefix  string
	version spec.Version
}

func newAMQPMessage(d amqp.Delivery, prefix string) *amqpMessage {
	m := &amqpMessage{d: d, prefix: prefix}
	if sv, ok := d.Headers[prefix+"specversion"].(string); ok {
		m.version = spec.WithPrefix(prefix).Version(sv)
	}
	return m
}

func (m *amqpMessage) ReadEncoding() binding.Encoding {
	if m.version != nil {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m *amqpMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *amqpMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	if m.d.ContentType != "" {
		if err := w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), m.d.ContentType); err != nil {
			return err
		}
	}
	for k, v := range m.d.Headers {
		if !strings.HasPrefix(k, m.prefix) {
			continue
		}
		var err error
		if attr := m.version.Attribute(k); attr != nil {
			err = w.SetAttribute(attr, v)
		} else {
			err = w.SetExtension(strings.ToLower(strings.TrimPrefix(k, m.prefix)), v)
		}
		if err != nil {
			return err
		}
	}
	if len(m.d.Body) > 0 {
		return w.SetData(bytes.NewReader(m.d.Body))
	}
	return nil
}

func (m *amqpMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if k == spec.DataContentType && m.d.ContentType != "" {
		return attr, m.d.ContentType
	}
	return attr, m.d.Headers[attr.PrefixedName()]
}

func (m *amqpMessage) GetExtension(name string) any { return m.d.Headers[m.prefix+name] }

func (m *amqpMessage) Finish(error) error { return nil }

// What the relay publishes with CloudEventsSource set, from rows written
// with plain SQL, is the event txbox means as the AMQP binding reads it,
// with either separator: every attribute, datacontenttype (the
// content_type property, whatever the case the writer gave Content-Type)
// and values as they are (AMQP strings need no encoding), no extension,
// and every cloudEvents header of a message with the configured separator.
// A row with its own cloudEvents_source (or CLOUDEVENTS_ID) header is
// parked dead and never published.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	for _, tc := range []struct {
		sep, forged string
	}{
		{"", "cloudEvents_source"}, // the default, "_"
		{":", "CLOUDEVENTS_ID"},
	} {
		t.Run("separator"+tc.sep, func(t *testing.T) {
			ctx := context.Background()
			ex := testenv.Name("ce-x")
			q := testenv.Name("ce")
			declare(t, url, q, ex, "ce.#")
			const source = "/shop/orders%2Fv1"
			p, err := txboxrabbitmq.NewPublisher(testenv.RabbitMQConn(t, url), txboxrabbitmq.PublisherConfig{Exchange: ex, Prefix: "ce.",
				CloudEventsSource: source, CloudEventsSeparator: tc.sep})
			testenv.Must(t, err, "publisher")
			defer p.Close()
			rows := testenv.CERows(func(s string) string { return s }, tc.forged)
			testenv.RelayCERows(t, p, rows)
			prefix := "cloudEvents_"
			if tc.sep == ":" {
				prefix = "cloudEvents:"
			}
			identity := func(_, v string) string { return v }
			for _, r := range rows {
				if r.Forged {
					continue
				}
				d, ok := get(t, url, q)
				if !ok {
					t.Fatalf("the queue holds no message for row %q", r.ID)
				}
				if d.MessageId != r.ID {
					t.Fatalf("read message %q, want row %q next", d.MessageId, r.ID)
				}
				for k := range d.Headers {
					if strings.HasPrefix(strings.ToLower(k), "cloudevents") && !strings.HasPrefix(k, prefix) {
						t.Errorf("row %q: header %q beside the %s ones", r.ID, k, prefix)
					}
				}
				e, err := binding.ToEvent(ctx, newAMQPMessage(d, prefix))
				testenv.Must(t, err, "the SDK reads %v", d.Headers)
				testenv.CheckCloudEvent(t, e, r, source, identity)
			}
			if d, ok := get(t, url, q); ok {
				t.Errorf("a message more in the queue: %q %v", d.MessageId, d.Headers)
			}
		})
	}
}

// With CloudEventsSource set, CheckMessage refuses a header whose name
// begins with cloudEvents in any case, as a rejection wrapping
// txbox.ErrReservedHeader; without it, such a header is an ordinary one.
// A separator other than "_" and ":" is refused.
func TestCheckMessageReservesCloudEventsNames(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	conn := testenv.RabbitMQConn(t, url)
	on, err := txboxrabbitmq.NewPublisher(conn, txboxrabbitmq.PublisherConfig{CloudEventsSource: "/shop"})
	testenv.Must(t, err, "publisher")
	off, err := txboxrabbitmq.NewPublisher(conn, txboxrabbitmq.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	for _, name := range []string{"cloudEvents_id", "CLOUDEVENTS_SOURCE", "cloudevents", "CloudEventsX"} {
		m := txbox.Message{ID: "m", Topic: "t", Headers: map[string]string{name: "v"}}
		if err := on.CheckMessage(m); !txbox.IsRejected(err) || !errors.Is(err, txbox.ErrReservedHeader) {
			t.Errorf("CloudEvents on, header %q: %v; want a rejection wrapping ErrReservedHeader", name, err)
		}
		if err := off.CheckMessage(m); err != nil {
			t.Errorf("CloudEvents off, header %q: %v", name, err)
		}
	}
	if _, err := txboxrabbitmq.NewPublisher(conn, txboxrabbitmq.PublisherConfig{CloudEventsSeparator: "."}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("separator \".\": %v, want ErrInvalidConfig", err)
	}
}
