FROM --platform=$BUILDPLATFORM golang:1.22 AS Build
FROM --platform=linux/arm64 alpine as runtime
FROM scratch
