FROM x
RUN\
 echo hi
ENV A=b=c
