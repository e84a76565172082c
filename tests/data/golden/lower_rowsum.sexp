(proc rowsum_single
  (nodes
    (node 9021 (label "x") single (dims 4 7))
    (node 9022 (label "s") single (dims 4)))
  (symbols
    (sym 0 i0)
    (sym 1 i1))
  (body
    (seq
      (zero_out 9022)
      (for i0 0 3
        (for i1 0 6
          (set 9022 (i0) (add (get 9022 (i0)) (identity (get 9021 (i0 i1))))))))))
