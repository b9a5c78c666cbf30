package txboxkafka

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/txbox/txbox/internal/printable"
)

// MaxTopic is the longest Kafka topic name.
const MaxTopic = 249

// CheckPrefix checks a Prefix: ASCII letters, digits, '.', '_' and '-',
// at most MaxTopic-1 bytes so that a topic follows it. NewPublisher
// refuses a Prefix CheckPrefix refuses. The error reads after the name of
// the setting: `"a:b": ':' is not allowed …` or `is 300 bytes, over …`.
func CheckPrefix(prefix string) error {
	if len(prefix) > MaxTopic-1 {
		return fmt.Errorf("is %d bytes, over the limit of %d bytes: a Kafka topic name is at most %d bytes, and the topic follows the prefix",
			len(prefix), MaxTopic-1, MaxTopic)
	}
	if !utf8.ValidString(prefix) {
		return fmt.Errorf("%q: not valid UTF-8", prefix)
	}
	if i := strings.IndexFunc(prefix, func(r rune) bool {
		return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-'))
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(prefix[i:])
		return fmt.Errorf("%q: %q is not allowed in a Kafka topic (want letters, digits, '.', '_' and '-')", prefix, r)
	}
	return nil
}

// MaxTransactionalID bounds a transactional id (kgo.TransactionalID):
// Kafka stores it as a protocol string of up to 32,767 bytes; txbox keeps
// it to the length of a topic name, readable in logs and in the broker's
// tools.
const MaxTransactionalID = 249

// CheckTransactionalID checks the transactional id of a transactional
// Publisher's client: not empty, at most MaxTransactionalID bytes, printable (no
// control character, no invalid UTF-8, no format character such as a bidi
// override), with no space at either end. NewPublisher refuses a client
// whose transactional id CheckTransactionalID refuses. The error reads
// after the name of the setting: `is 300 bytes, over …` or `" id": want …`.
func CheckTransactionalID(id string) error {
	if len(id) > MaxTransactionalID {
		return fmt.Errorf("is %d bytes, over the limit of %d bytes", len(id), MaxTransactionalID)
	}
	if id == "" {
		return fmt.Errorf("is empty")
	}
	if printable.Cell(id) != id || strings.TrimSpace(id) != id {
		return fmt.Errorf("%q: want printable characters, with no space at either end", id)
	}
	return nil
}
