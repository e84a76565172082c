(proc embed
  (nodes
    (node 1 (label "tokens") int32 (dims 2 3))
    (node 2 (label "wte") single (dims 5 4))
    (node 3 (label "out") single (dims 2 3 4)))
  (symbols
    (sym 0 i0)
    (sym 1 i1)
    (sym 2 i2)
    (sym 3 i3))
  (body
    (for i0 0 1
      (for i1 0 2
        (bind_index i3 1 (i0 i1) 5 2 0
          (for i2 0 3
            (set 3 (i0 i1 i2) (identity (get 2 (i3 i2))))))))))
