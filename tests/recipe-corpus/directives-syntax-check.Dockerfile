# syntax=docker/dockerfile:1
# check=skip=JSONArgsRecommended
FROM alpine:3.19
RUN echo ok
