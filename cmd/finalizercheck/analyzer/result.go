package analyzer

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"
)

// cleanupUses counts, for each variable of type runtime.Cleanup, its uses
// in the package and those of them that call its Stop method.
type cleanupUses struct {
	all, stop map[types.Object]int
}

func isRuntimeCleanup(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "runtime" && n.Obj().Name() == "Cleanup"
}

func countCleanupUses(pass *analysis.Pass, insp *inspector.Inspector) cleanupUses {
	u := cleanupUses{all: make(map[types.Object]int), stop: make(map[types.Object]int)}
	for _, obj := range pass.TypesInfo.Uses {
		if v, ok := obj.(*types.Var); ok && isRuntimeCleanup(v.Type()) {
			u.all[v]++
		}
	}
	insp.Preorder([]ast.Node{(*ast.SelectorExpr)(nil)}, func(n ast.Node) {
		sel := n.(*ast.SelectorExpr)
		if x, ok := sel.X.(*ast.Ident); ok && sel.Sel.Name == "Stop" {
			if obj := pass.TypesInfo.Uses[x]; obj != nil && u.all[obj] > 0 {
				u.stop[obj]++
			}
		}
	})
	return u
}

// resultUse says why the runtime.Cleanup result of call (the last element
// of stack) cannot simply become a finalizerwatch.Cleanup, or returns ""
// if it can: when it is discarded, or only used to call Stop, directly or
// through a variable declared without a type.
func resultUse(pass *analysis.Pass, call *ast.CallExpr, stack []ast.Node, uses cleanupUses) string {
	const retype = "; finalizerwatch.AddCleanup returns a finalizerwatch.Cleanup, so change that type along with the call"
	var child ast.Node = call
	i := len(stack) - 2
	for ; i > 0; i-- {
		p, ok := stack[i].(*ast.ParenExpr)
		if !ok {
			break
		}
		child = p
	}
	switch p := stack[i].(type) {
	case *ast.ExprStmt:
		return ""
	case *ast.SelectorExpr: // .Stop, the only selector a Cleanup has
		return ""
	case *ast.AssignStmt:
		k := indexOf(p.Rhs, child)
		if k < 0 || len(p.Lhs) != len(p.Rhs) {
			break
		}
		lhs := p.Lhs[k]
		if isBlank(lhs) {
			return ""
		}
		if id, ok := lhs.(*ast.Ident); ok && p.Tok == token.DEFINE {
			if obj := pass.TypesInfo.Defs[id]; obj != nil {
				return onlyStopped(uses, obj, retype)
			}
		}
		return "its result is assigned to " + types.ExprString(lhs) + ", a runtime.Cleanup" + retype
	case *ast.ValueSpec:
		k := indexOf(p.Values, child)
		if k < 0 || len(p.Names) != len(p.Values) {
			break
		}
		if p.Names[k].Name == "_" {
			return ""
		}
		if p.Type != nil {
			return "its result initializes " + p.Names[k].Name + ", declared " + types.ExprString(p.Type) + retype
		}
		return onlyStopped(uses, pass.TypesInfo.Defs[p.Names[k]], retype)
	case *ast.ReturnStmt:
		return "its result is returned as a runtime.Cleanup" + retype
	case *ast.CallExpr:
		return "its result is passed to " + types.ExprString(p.Fun) + " as a runtime.Cleanup" + retype
	}
	return "its result is used as a runtime.Cleanup" + retype
}

// onlyStopped returns "" if every use of the variable obj calls its Stop
// method, and the reason for no fix otherwise.
func onlyStopped(uses cleanupUses, obj types.Object, retype string) string {
	if obj == nil || uses.all[obj] == uses.stop[obj] {
		return ""
	}
	return "its result is stored in " + obj.Name() + ", which is used other than to call " + obj.Name() + ".Stop" + retype
}

func indexOf(list []ast.Expr, n ast.Node) int {
	for i, e := range list {
		if e == n {
			return i
		}
	}
	return -1
}

func isBlank(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "_"
}
