FROM x
CMD ["a", 1]
