(proc matmul
  (nodes
    (node 9101 (label "a") single (dims 2 3))
    (node 9102 (label "b") single (dims 3 4))
    (node 9103 (label "c") single (dims 2 4)))
  (symbols
    (sym 0 i0)
    (sym 1 i1)
    (sym 2 i2))
  (body
    (seq
      (zero_out 9103)
      (for i0 0 1
        (for i1 0 2
          (for i2 0 3
            (set 9103 (i0 i2) (add (get 9103 (i0 i2)) (mul (get 9101 (i0 i1)) (get 9102 (i1 i2)))))))))))
