FROM x
RUN echo hello \
# comment
world
RUN echo a \

  b \
    # indented comment
  c
USER after
