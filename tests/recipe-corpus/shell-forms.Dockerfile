FROM x
RUN echo "$HOME" # not a comment
CMD echo hello world
ENTRYPOINT exec top -b
