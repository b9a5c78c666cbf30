package cli

import (
	"context"
	"fmt"
	"io"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox/txboxrabbitmq"
)

// Environment variables of the RabbitMQ flags.
const (
	EnvExchange = "TXBOX_EXCHANGE"
)

// amqpFlags are the flags of --broker amqp://… and amqps://….
type amqpFlags struct {
	exchange        string
	allowUnroutable bool
	ceSeparator     string // --cloudevents-amqp-separator
}

func (f *amqpFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.exchange, "exchange", envOr(EnvExchange, ""),
		"RabbitMQ only: exchange every message is published to, with routing key --subject-prefix + topic; it must exist; empty is the default exchange, which routes to the queue named by the routing key (env "+EnvExchange+")")
	fs.BoolVar(&f.allowUnroutable, "allow-unroutable", false,
		"RabbitMQ only: publish without the mandatory flag, so that a message no queue is bound to is dropped by the broker and counts as published (default: mandatory, such a message comes back and is rejected, and ends dead after --max-attempts)")
	fs.StringVar(&f.ceSeparator, "cloudevents-amqp-separator", "_",
		`RabbitMQ with --cloudevents-source only: the separator of the CloudEvents headers, "_" (cloudEvents_id: what JMS 2.0 consumers and Spring read) or ":" (cloudEvents:id: what the CloudEvents Go and Java SDKs' AMQP bindings read)`)
}

// check refuses the RabbitMQ flags with another broker.
func (f *amqpFlags) check(fs *pflag.FlagSet, scheme string) error {
	if s := f.ceSeparator; s != "" && s != "_" && s != ":" {
		return fmt.Errorf(`--cloudevents-amqp-separator %q: want "_" or ":"`, f.ceSeparator)
	}
	if scheme == "amqp" || scheme == "amqps" {
		if err := txboxrabbitmq.CheckExchange(f.exchange); err != nil {
			return fmt.Errorf("%s %w", sourceOf(fs, "exchange", EnvExchange), err)
		}
		return nil
	}
	if f.exchange != "" {
		return fmt.Errorf("%s is for RabbitMQ (amqp://), not %s", sourceOf(fs, "exchange", EnvExchange), brokerKind(scheme))
	}
	if f.allowUnroutable {
		return fmt.Errorf("--allow-unroutable is for RabbitMQ (amqp://), not %s", brokerKind(scheme))
	}
	if fs != nil && fs.Changed("cloudevents-amqp-separator") {
		return fmt.Errorf("--cloudevents-amqp-separator is for RabbitMQ (amqp://), not %s", brokerKind(scheme))
	}
	return nil
}

// brokerKind names the broker of scheme in an error.
func brokerKind(scheme string) string {
	if scheme == "" {
		return "the embedded NATS server"
	}
	return scheme + "://"
}

// openRabbitMQ builds the RabbitMQ publisher: persistent messages,
// publisher confirms (always: without them a row would be marked
// published that the broker may never have taken), mandatory routing
// unless --allow-unroutable.
func (b *broker) openRabbitMQ(ctx context.Context, f *brokerFlags, out io.Writer) error {
	p, err := txboxrabbitmq.FromURL(ctx, f.url, txboxrabbitmq.PublisherConfig{
		Exchange: f.amqp.exchange, Prefix: f.subjectPrefix, AllowUnroutable: f.amqp.allowUnroutable,
		CloudEventsSource: f.ceSource, CloudEventsSeparator: f.amqp.ceSeparator},
		txboxrabbitmq.ConnConfig{AMQP: amqp.Config{Properties: amqp.Table{"connection_name": "txbox relay"}}})
	if err != nil {
		return err
	}
	b.pub, b.close = p, p.Close
	exchange, routing := "the default exchange", "mandatory"
	if f.amqp.exchange != "" {
		exchange = "exchange " + cell(f.amqp.exchange)
	}
	if f.amqp.allowUnroutable {
		routing = "not mandatory: unroutable messages are dropped"
	}
	fmt.Fprintf(out, "RabbitMQ at %s: %s, routing key %s<topic>, publisher confirms, %s\n", b.desc, exchange, cell(f.subjectPrefix), routing)
	return nil
}
