FROM x
RUN a \
  b

ENV A=1
