FROM x
ENV A='single $x' B="dq \"in\" \$y" C=a\$b
