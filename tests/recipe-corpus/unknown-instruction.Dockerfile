FROM x
  FOO bar
