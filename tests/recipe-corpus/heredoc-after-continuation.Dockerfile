FROM x
RUN cat <<EOF \
  | tr a-z A-Z
hello
EOF
