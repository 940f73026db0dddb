FROM x
RUN a \   
 b \	
c
