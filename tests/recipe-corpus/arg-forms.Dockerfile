FROM busybox
ARG user1
ARG buildno=1
ARG A=1 B C="x y"
ARG EMPTY=
