(proc matmul_single
  (nodes
    (node 9001 (label "x") single (dims 4 6))
    (node 9002 (label "w") single (dims 6 5))
    (node 9003 (label "y") single (dims 4 5)))
  (symbols
    (sym 0 i0)
    (sym 1 i1)
    (sym 2 i2))
  (body
    (seq
      (zero_out 9003)
      (for i0 0 3
        (for i1 0 5
          (for i2 0 4
            (set 9003 (i0 i2) (add (get 9003 (i0 i2)) (mul (get 9001 (i0 i1)) (get 9002 (i1 i2)))))))))))
