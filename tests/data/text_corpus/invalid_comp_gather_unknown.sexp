(comp
  (nodes
    (node 1 (label "tokens") int32 (dims 2 3))
    (node 2 (label "wte") single (dims 5 4))
    (node 3 (label "out") single (dims 2 3 4)))
  (symbols)
  (embedded)
  (body
    (accum_op 3 arg2 identity (2) "@3[bt]c=>btc" (gather 1) initialize_neutral)))
