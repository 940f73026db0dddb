FROM x
COPY <<EOF /etc/fake.Dockerfile
# a comment, kept
FROM not-a-stage
RUN not \

EOF
RUN echo done
