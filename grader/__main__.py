from grader.entry import main

main()
