FROM x
RUN echo a \