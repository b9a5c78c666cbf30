module github.com/txbox/txbox

go 1.26.0

toolchain go1.26.8

require github.com/google/uuid v1.6.0
