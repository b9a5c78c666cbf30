module github.com/txbox/txbox/txboxrabbitmq

go 1.26.0

toolchain go1.26.8

require (
	github.com/rabbitmq/amqp091-go v1.17.0
	github.com/txbox/txbox v0.1.0
)

require github.com/google/uuid v1.6.0 // indirect
