FROM alpine
RUN <<A cat /dev/stdin <<B
first
A
second
B
