module github.com/txbox/txbox/rabbitmq

go 1.26.0

toolchain go1.26.8

require (
	github.com/rabbitmq/amqp091-go v1.17.0
	github.com/txbox/txbox v0.0.0-00010101000000-000000000000
)

require github.com/google/uuid v1.6.0 // indirect

replace github.com/txbox/txbox => ..
