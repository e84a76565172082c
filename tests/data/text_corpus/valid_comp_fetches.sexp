(comp
  (nodes
    (node 21 (label "s") double (dims 3))
    (node 22 (label "batch") double (dims 5 3))
    (node 23 (label "e") int64 (dims))
    (node 24 (label "ctr") uint4x32 (dims 2))
    (node 25 (label "u") half (dims 16))
    (node 26 (label "z") byte (dims 2)))
  (symbols
    (static 0 batch_n 5))
  (embedded 21 26)
  (body
    (seq
      (fetch 21 constant -0)
      (fetch 23 constant_bits #xfffffffffffffff9)
      (fetch 21 constant_fill 0.1 nan -inf)
      (fetch 22 range_over_offsets)
      (fetch 21 slice batch_n 22)
      (fetch 23 embed_symbol batch_n)
      (fetch 23 embed_self_id)
      (accum_op 21 max relu ((merge 22)) "{batch_n}i=>i")
      (set_vec_unop 25 uint4x32_to_prec_uniform 24 "i=>i")
      (block_comment "nothing" (noop)))))
