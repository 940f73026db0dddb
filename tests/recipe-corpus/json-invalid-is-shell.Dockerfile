FROM x
RUN [ "broken
CMD ['single', 'quotes']
ENTRYPOINT [ "-f" ] && true
