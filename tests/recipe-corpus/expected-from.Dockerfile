RUN x
