FROM golang:1.22 AS builder
WORKDIR /src
RUN go build -o /bin/app .
FROM alpine
COPY --from=builder /bin/app /bin/app
COPY --from=0 /src/README /
COPY --from=nginx:latest /etc/nginx/nginx.conf /nginx.conf
