; Every statement and scalar form of the low-level grammar (ir/text.h).
(proc all_forms
  (nodes
    (node 1 (label "x" grad) single (dims 4 6))
    (node 2 (label h) half (dims 8))
    (node 3 (label "n") int32 (dims 4))
    (node 4 (label "key") uint4x32 (dims))
    (node 5 (label "d") double (dims))
    (node 6 (label "v") bfloat16 (dims 4))
    (node 7 (label "p") fp8 (dims 4 5) (padding -0.5 (1 1) (0 2))))
  (symbols
    (sym 0 i)
    (sym 1 j)
    (static 2 batch_n 4)
    (static 3 open 0))
  (body
    (seq
      (comment "escapes: \"q\" \\ \n \t \x7f")
      (zero_out 1)
      (for i 0 3
        (for j 0 5 untraced
          (seq
            (set 1 (i j) (add (get 1 (i j)) (mul 0.5 (get_merge_buffer 1 (i j)))))
            (set 1 ((+ (* 2 i) (* -1 batch_n) 1) 0) (where (get 3 (i)) (fma -0 inf -inf) (sub nan (f64 #x7ff0000000000123))))
            (set 2 ((* 2 i)) (tanh_approx (recip_sqrt (exp2 (log2 (get 2 (i)))))))
            (set 5 () (to_pow_of 1e300 4.9406564584124654e-324))
            (set 4 () (threefry4x32_crypto #xffffffffffffffd6 (threefry4x32_light #x8000000000000000 (embed (+ (* 5 batch_n) (* 7 open) -3)))))
            (set 3 (i) (uint4x32_to_prec_uniform1 (get 4 ())))
            (set_from_vec 6 (0) 4 uint4x32_to_prec_uniform (get 4 ()))
            (set 7 (i (+ open -2)) 2.5)
            (set 2 (i) (local_scope 0 6 (i) (seq (set_local 0 0) (set_local 0 (add (get_local 0) (get 1 (i j)))))))))))))
