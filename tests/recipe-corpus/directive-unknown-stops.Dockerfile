# unknowndirective=value
# escape=`
FROM x
RUN a \
b
