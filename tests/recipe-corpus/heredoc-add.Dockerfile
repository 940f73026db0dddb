FROM alpine
ADD <<EOF /etc/motd
welcome
EOF
