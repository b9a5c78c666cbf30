// Command natsd runs the crash harness's private NATS server (natsembed,
// JetStream on -dir) on -port until it is killed. The harness SIGKILLs it
// and starts it again on the same port and storage.
//
//	natsd -dir DIR -port PORT
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/txbox/txbox/natsembed"
)

func main() {
	dir := flag.String("dir", "", "JetStream storage")
	port := flag.Int("port", 0, "port to listen on")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix(fmt.Sprintf("natsd[%d] ", os.Getpid()))
	s, err := natsembed.Start(natsembed.Config{Dir: *dir, Port: *port})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("ready on %s", s.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	s.Shutdown()
}
