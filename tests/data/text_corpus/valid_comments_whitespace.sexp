;; leading comment
   (proc   spacey   ; trailing comment
(nodes(node 11(label)byte(dims 3)))(symbols(sym 0 k))
	(body
	  (for k 0 2 (set 11 (k) (relu_gate (cmplt (embed k) 2) (max 1 (min 200 (mod 7 3)))))))) ; done
